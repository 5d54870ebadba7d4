//! Private files: written whole or not at all (beside their place, synced, renamed into place,
//! the directory synced: a crash leaves the old file, or none, and at most a staging file beside
//! it, which the next write replaces), and tokens read only from files their owner alone can
//! read.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use anyhow::Context as _;

/// Writes `bytes` at `target` (private), whole or not at all: beside it, synced, renamed into
/// place, the directory synced.
pub(crate) fn place(target: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let dir = target.parent().context("a place has a directory")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let staging = target.with_extension("partial");
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&staging)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&staging, target)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if let Err(error) = written {
        let _ignored = std::fs::remove_file(&staging);
        return Err(error).with_context(|| format!("cannot write {}", target.display()));
    }
    Ok(())
}

/// The token in `path` (trimmed), refused when others can read the file.
pub(crate) fn read_token(path: &Path) -> anyhow::Result<String> {
    let metadata =
        std::fs::metadata(path).with_context(|| format!("token file {}", path.display()))?;
    if metadata.permissions().mode() & 0o077 != 0 {
        anyhow::bail!(
            "token file {} can be read by others (mode {:o}); make it 0600",
            path.display(),
            metadata.permissions().mode() & 0o777
        );
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(4096).read_to_string(&mut text))
        .with_context(|| format!("token file {}", path.display()))?;
    let token = text.trim().to_owned();
    if token.len() < 32 {
        anyhow::bail!("token file {}: the token is shorter than 32 characters", path.display());
    }
    Ok(token)
}
