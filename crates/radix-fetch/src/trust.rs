//! The cache holds code radix runs: PJRT plugins (shared libraries) and
//! compiled executables (machine code). A folder that another local user
//! owns or can write is a place to plant such code, so the cache's folders
//! are created private (0700) and every folder radix loads code from is
//! checked before use: it must belong to the user radix runs as and must
//! not be writable by the group or by others.

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

use crate::{Error, Result};

/// Creates `dir` (and missing parents) readable and writable by its owner
/// only, then checks it as [`check_private`] does.
pub fn private_dir(dir: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io(dir, e))?;
    check_private(dir)
}

/// Checks that the folder `dir` belongs to the user radix runs as and that
/// neither its group nor others can write it: files in it cannot have been
/// planted by another local user.
pub fn check_private(dir: &Path) -> Result<()> {
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    let untrusted = |reason: String| Error::Untrusted {
        path: dir.to_path_buf(),
        reason,
    };
    if !meta.is_dir() {
        return Err(untrusted("not a folder".into()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(untrusted(format!(
            "owned by user {}, not by this user ({me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(untrusted(format!(
            "writable by its group or by others (mode {:o}); `chmod go-w` it",
            meta.mode() & 0o777
        )));
    }
    Ok(())
}
