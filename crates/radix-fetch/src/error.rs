//! The one error type of the fetch crate.

use std::path::PathBuf;

/// What can go wrong while fetching, checking or unpacking a wheel. Callers
/// map it into their own errors (the PJRT crate reports a plugin wheel that
/// cannot be fetched as a provisioning error of its target).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// pip could not be run, failed, or left no wheel.
    #[error("cannot fetch {requirement}: {reason}")]
    Download {
        /// `name==version`, as given to pip.
        requirement: String,
        /// What was tried and what to do about it.
        reason: String,
    },
    /// A downloaded or cached file does not have the pinned sha256.
    #[error("{path}: sha256 is {got}, expected {expected}")]
    Checksum {
        /// The file that was checked.
        path: PathBuf,
        /// The pinned digest.
        expected: String,
        /// The digest of the file.
        got: String,
    },
    /// The wheel is not a zip archive radix can unpack, or an entry would
    /// land outside the unpack folder.
    #[error("{path}: not a usable wheel: {reason}")]
    Wheel {
        /// The wheel file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// A cache folder radix would load code from could have been written
    /// by another user.
    #[error(
        "{path}: {reason}; radix runs code from its cache folders and uses only folders of the user's own that no one else can write"
    )]
    Untrusted {
        /// The folder.
        path: PathBuf,
        /// Who else could write it.
        reason: String,
    },
    /// The pinned wheel is for another platform than this machine's.
    #[error(
        "cannot fetch {requirement} for this machine, {machine}: the pinned wheel is for {pinned} only"
    )]
    NoWheelForPlatform {
        /// `name==version`.
        requirement: String,
        /// This machine, as [`crate::Machine`] writes it (`linux aarch64 (glibc 2.39)`).
        machine: String,
        /// The platforms of the pinned wheel's tag.
        pinned: String,
    },
    /// A pinned wheel tag that is not `python-abi-platform`.
    #[error("wheel tag {tag:?}: {reason}")]
    Tag {
        /// The tag as pinned.
        tag: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The user has no cache folder and `RADIX_CACHE_DIR` is not set.
    #[error("no cache folder: set RADIX_CACHE_DIR (or HOME)")]
    NoCacheDir,
    /// A filesystem operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// `Result` with the fetch crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
