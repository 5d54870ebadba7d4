//! Paths of a [`SimFs`](super::SimFs): splitting, and resolving them against the volatile
//! directory entries (what the running process sees).

use std::io;
use std::path::{Component, Path};

use super::{Ino, Node, ROOT_INO, State, io_error};
use crate::{Boundary, Error, OpKind, Result};

impl State {
    pub(super) fn lookup_components(&self, components: &[&str]) -> Option<Ino> {
        let mut ino = ROOT_INO;
        for component in components {
            match &self.inodes[&ino].node {
                Node::Dir(dir) => ino = *dir.volatile.get(*component)?,
                Node::File(_) => return None,
            }
        }
        Some(ino)
    }

    /// Resolves `components` to a directory, or a `NotFound`/`NotADirectory` error.
    pub(super) fn lookup_dir(
        &self,
        components: &[&str],
        op: OpKind,
        path: &Path,
        boundary: Boundary,
    ) -> Result<Ino> {
        let ino = self
            .lookup_components(components)
            .ok_or_else(|| io_error(op, path, boundary, io::ErrorKind::NotFound))?;
        match self.inodes[&ino].node {
            Node::Dir(_) => Ok(ino),
            Node::File(_) => Err(io_error(op, path, boundary, io::ErrorKind::NotADirectory)),
        }
    }
}

/// Splits `path` into normal components; `/` and `.` are skipped, `..` is refused so that a
/// simulated path can never escape where the caller meant it to be.
pub(super) fn normalize(path: &Path, op: OpKind) -> Result<Vec<&str>> {
    let mut components = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => components.push(name.to_str().ok_or_else(|| {
                Error::io(
                    op,
                    path,
                    None,
                    io::Error::new(io::ErrorKind::InvalidInput, "path is not UTF-8"),
                )
            })?),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(Error::io(
                    op,
                    path,
                    None,
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "`..` and prefixes are not supported",
                    ),
                ));
            }
        }
    }
    Ok(components)
}

pub(super) fn split_image_path(path: &str) -> Vec<&str> {
    path.split('/').filter(|component| !component.is_empty()).collect()
}
