//! Paths of a [`SimFs`](super::SimFs): splitting, and resolving them against the volatile
//! directory entries (what the running process sees).

use std::io;
use std::path::{Component, Path};

use super::{Ino, Node, ROOT_INO, SYMLINKS_FOLLOWED_MAX, State, io_error};
use crate::{Boundary, Error, OpKind, Result};

impl State {
    /// Resolves `components` as the kernel does: a symbolic link in a directory position is
    /// followed (even by an `O_NOFOLLOW` open); one in the last position is returned itself
    /// (lstat), unless `follow_last`. `None` when a name is missing, a file sits where a
    /// directory must, or links loop.
    pub(super) fn resolve<'a>(&'a self, components: &[&'a str], follow_last: bool) -> Option<Ino> {
        let mut pending: Vec<&'a str> = components.iter().rev().copied().collect();
        let mut ino = ROOT_INO;
        let mut followed = 0;
        while let Some(component) = pending.pop() {
            let Node::Dir(dir) = &self.inode(ino).node else { return None };
            let next = *dir.volatile.get(component)?;
            match &self.inode(next).node {
                Node::Symlink(target) if follow_last || !pending.is_empty() => {
                    followed += 1;
                    if followed > SYMLINKS_FOLLOWED_MAX {
                        return None;
                    }
                    pending.extend(split_image_path(target).into_iter().rev());
                    ino = ROOT_INO;
                }
                _ => ino = next,
            }
        }
        assert!(
            !follow_last || !matches!(self.inode(ino).node, Node::Symlink(_)),
            "a resolution that follows links ends on something else"
        );
        Some(ino)
    }

    /// [`State::resolve`], the last component not followed.
    pub(super) fn lookup_components<'a>(&'a self, components: &[&'a str]) -> Option<Ino> {
        self.resolve(components, false)
    }

    /// Resolves `components` to a directory, or a `NotFound`/`NotADirectory` error.
    pub(super) fn lookup_dir<'a>(
        &'a self,
        components: &[&'a str],
        op: OpKind,
        path: &Path,
        boundary: Boundary,
    ) -> Result<Ino> {
        let ino = self
            .resolve(components, true)
            .ok_or_else(|| io_error(op, path, boundary, io::ErrorKind::NotFound))?;
        match self.inode(ino).node {
            Node::Dir(_) => Ok(ino),
            Node::File(_) | Node::Symlink(_) | Node::Special => {
                Err(io_error(op, path, boundary, io::ErrorKind::NotADirectory))
            }
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
