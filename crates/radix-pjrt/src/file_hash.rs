//! The sha256 of a plugin file, remembered across processes.
//!
//! Executable caches key on the plugin's sha256 (an executable only loads
//! into the plugin build that made it), and hashing a 200 MB plugin takes
//! longer than loading a cached executable. So the digest is remembered in
//! the radix cache (`hashes/`), stamped with the file's size, modification
//! time, inode and device: a plugin replaced or rewritten in place gets a
//! new stamp and is hashed again.

use std::fs;
use std::path::{Path, PathBuf};

use sha2::Digest;

use crate::{Error, Result};

/// The hex sha256 of the file at `path`, from the memo when its stamp
/// still matches the file.
pub(crate) fn sha256(path: &Path) -> Result<String> {
    match radix_fetch::cache_dir() {
        Ok(cache) => sha256_remembered_in(path, &cache.join("hashes")),
        // No cache folder: nowhere to remember, so hash every time.
        Err(_) => hash(path),
    }
}

/// [`sha256`] with the memos in `dir`.
fn sha256_remembered_in(path: &Path, dir: &Path) -> Result<String> {
    // Memos another user could write are neither read nor written.
    if let Err(e) = radix_fetch::private_dir(dir) {
        tracing::warn!("not remembering plugin hashes: {e}");
        return hash(path);
    }
    let stamp = stamp(path).map_err(|e| Error::io(path, e))?;
    let memo = memo_path(path, dir);
    if let Some(digest) = fs::read_to_string(&memo)
        .ok()
        .and_then(|text| remembered(&text, &stamp))
    {
        return Ok(digest);
    }
    let digest = hash(path)?;
    // A memo that cannot be written only costs the next process a hash.
    if let Err(e) = write_memo(&memo, &format!("{stamp} {digest}\n")) {
        tracing::debug!(memo = %memo.display(), "cannot remember a plugin hash: {e}");
    }
    Ok(digest)
}

/// The digest in a memo's `text` if it was made for `stamp`.
fn remembered(text: &str, stamp: &str) -> Option<String> {
    let digest = text.strip_prefix(stamp)?.strip_prefix(' ')?.trim_end();
    let is_hex = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    is_hex.then(|| digest.to_string())
}

/// What changes when the file does: size, modification time (ns), inode and
/// device.
fn stamp(path: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path)?;
    Ok(format!(
        "{} {}.{:09} {} {}",
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ino(),
        m.dev()
    ))
}

/// The memo of `path` in `dir`: named by the sha256 of the path itself.
fn memo_path(path: &Path, dir: &Path) -> PathBuf {
    let name = hex::encode(sha2::Sha256::digest(path.as_os_str().as_encoded_bytes()));
    dir.join(&name[..32])
}

fn write_memo(memo: &Path, text: &str) -> std::io::Result<()> {
    let dir = memo.parent().expect("a memo is inside its folder");
    // Written beside and renamed, so a reader never sees half a memo.
    let tmp = dir.join(format!(".{}.tmp", std::process::id()));
    fs::write(&tmp, text)?;
    fs::rename(&tmp, memo)
}

fn hash(path: &Path) -> Result<String> {
    radix_fetch::sha256_file(path).map_err(|e| Error::PluginLoad {
        path: path.to_path_buf(),
        reason: format!("cannot hash it: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_counts_only_for_its_stamp() {
        let digest = "ab".repeat(32);
        let text = format!("10 5.000000001 7 8 {digest}\n");
        assert_eq!(remembered(&text, "10 5.000000001 7 8"), Some(digest));
        // Another size, a stamp that is a prefix of the real one, no digest.
        assert_eq!(remembered(&text, "11 5.000000001 7 8"), None);
        assert_eq!(remembered(&text, "10 5.000000001 7"), None);
        assert_eq!(
            remembered("10 5.000000001 7 8 xyz\n", "10 5.000000001 7 8"),
            None
        );
    }

    #[test]
    fn a_rewritten_file_is_hashed_again() {
        let dir = tempfile::tempdir().unwrap();
        let (file, memos) = (dir.path().join("plugin.so"), dir.path().join("hashes"));
        let sha256 = |path: &Path| sha256_remembered_in(path, &memos).unwrap();
        fs::write(&file, b"one").unwrap();
        let first = sha256(&file);
        assert_eq!(first, hex::encode(sha2::Sha256::digest(b"one")));
        assert_eq!(fs::read_dir(&memos).unwrap().count(), 1);
        assert_eq!(sha256(&file), first);
        fs::write(&file, b"two, longer").unwrap();
        assert_eq!(
            sha256(&file),
            hex::encode(sha2::Sha256::digest(b"two, longer"))
        );
    }
}
