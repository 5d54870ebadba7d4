//! Paths of a [`SimFs`](super::SimFs): splitting, and resolving them against the volatile
//! directory entries (what the running process sees).

use std::io;
use std::path::Path;

use smallvec::SmallVec;

use super::{Ino, Node, ROOT_INO, SYMLINKS_FOLLOWED_MAX, State, io_error};
use crate::{Boundary, Error, OpKind, Result};

impl State {
    /// Resolves `components` as the kernel does: a symbolic link in a directory position is
    /// followed (even by an `O_NOFOLLOW` open); one in the last position is returned itself
    /// (lstat), unless `follow_last`. `None` when a name is missing, a file sits where a
    /// directory must, or links loop.
    pub(super) fn resolve<'a>(&'a self, components: &[&'a str], follow_last: bool) -> Option<Ino> {
        // The components still to walk: those of the path, then (once a link is followed)
        // those of the link's target ahead of the rest. Most paths hold no link: no copy.
        let mut rest: &[&'a str] = components;
        let mut pending: Vec<&'a str> = Vec::new();
        let mut ino = ROOT_INO;
        let mut followed = 0;
        loop {
            let component = match pending.pop() {
                Some(component) => component,
                None => match rest.split_first() {
                    Some((first, others)) => {
                        rest = others;
                        *first
                    }
                    None => break,
                },
            };
            let Node::Dir(dir) = &self.inode(ino).node else { return None };
            let next = *dir.volatile.get(component)?;
            let more = !pending.is_empty() || !rest.is_empty();
            match &self.inode(next).node {
                Node::Symlink(target) if follow_last || more => {
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
        debug_assert!(followed <= SYMLINKS_FOLLOWED_MAX, "a resolution follows links within bound");
        Some(ino)
    }

    /// [`State::resolve`], the last component not followed.
    pub(super) fn lookup_components<'a>(&'a self, components: &[&'a str]) -> Option<Ino> {
        debug_assert!(
            components.iter().all(|name| !name.is_empty() && !name.contains('/')),
            "a path is looked up one component at a time"
        );
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
        let found = match self.inode(ino).node {
            Node::Dir(_) => Ok(ino),
            Node::File(_) | Node::Symlink(_) | Node::Special => {
                Err(io_error(op, path, boundary, io::ErrorKind::NotADirectory))
            }
        };
        debug_assert!(
            !components.is_empty() || found.as_ref().is_ok_and(|ino| *ino == ROOT_INO),
            "no component names the root"
        );
        found
    }
}

/// A path's names, in order: held inline up to a depth no store path exceeds (an op splits its
/// path once, and most ops are on paths a few names deep).
pub(super) type Components<'p> = SmallVec<[&'p str; 8]>;

/// Splits `path` into normal components; `/` and `.` are skipped, `..` is refused so that a
/// simulated path can never escape where the caller meant it to be. Paths are Unix paths:
/// components are what lies between slashes, as `Path::components` reads them.
pub(super) fn normalize(path: &Path, op: OpKind) -> Result<Components<'_>> {
    let refuse = |reason: &'static str| {
        Error::io(op, path, None, io::Error::new(io::ErrorKind::InvalidInput, reason))
    };
    // One check of the whole path (a name holds no `/`, so its bytes are valid alone too).
    let text = path.to_str().ok_or_else(|| refuse("path is not UTF-8"))?;
    let mut components = Components::new();
    // Split at each `/` byte (a byte search: `str::split` with a char pattern costs more on
    // paths this short); a `/` is one byte in UTF-8, so each piece is whole characters.
    let mut start = 0;
    for end in
        (0..text.len()).filter(|&at| text.as_bytes().get(at) == Some(&b'/')).chain([text.len()])
    {
        match text.get(start..end).expect("split at a `/`, a character boundary") {
            "" | "." => {}
            ".." => return Err(refuse("`..` and prefixes are not supported")),
            name => components.push(name),
        }
        start = end + 1;
    }
    debug_assert!(
        components.iter().all(|name| !name.is_empty() && *name != "." && *name != ".."),
        "a normalized path holds names only"
    );
    Ok(components)
}

pub(super) fn split_image_path(path: &str) -> Vec<&str> {
    debug_assert!(path.is_empty() || path.starts_with('/'), "an image path is absolute");
    path.split('/').filter(|component| !component.is_empty()).collect()
}

/// The image path of `name` in the directory at `prefix` (`""` for the root): `prefix/name`,
/// built in one allocation (walks over a whole tree build one per node).
pub(super) fn child_path(prefix: &str, name: &str) -> String {
    debug_assert!(!name.is_empty() && !name.contains('/'), "an entry's name is one component");
    let mut path = String::with_capacity(prefix.len() + 1 + name.len());
    path.push_str(prefix);
    path.push('/');
    path.push_str(name);
    path
}

#[cfg(test)]
mod tests {
    use std::path::{Component, Path};

    use super::normalize;
    use crate::OpKind;

    #[test]
    fn components_are_those_path_components_reads() {
        for path in ["/", "", "/a", "a/b", "/a//b/", "./a/./b", "/a/b/.", "//x/./y//z", "/é/ü"] {
            let path = Path::new(path);
            let expected: Vec<&str> = path
                .components()
                .filter_map(|component| match component {
                    Component::Normal(name) => name.to_str(),
                    _ => None,
                })
                .collect();
            let components = normalize(path, OpKind::Open).expect("a plain path");
            assert_eq!(components.as_slice(), expected, "{path:?}");
        }
        for path in ["/a/../b", "..", "a/.."] {
            assert!(normalize(Path::new(path), OpKind::Open).is_err(), "{path} is refused");
        }
        let not_utf8 =
            Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"/a/\xff"));
        assert!(normalize(not_utf8, OpKind::Open).is_err(), "a name that is not UTF-8 is refused");
    }
}
