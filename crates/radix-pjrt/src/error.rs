//! The one error type of the runtime crate.

use std::path::PathBuf;

/// Everything that can go wrong while finding, loading or driving a PJRT plugin.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PJRT call returned an error.
    #[error("PJRT {call} failed ({code}): {message}")]
    Pjrt {
        /// The C API function that failed, e.g. `PJRT_Client_Compile`.
        call: &'static str,
        /// The PJRT error code name, e.g. `INVALID_ARGUMENT`.
        code: &'static str,
        /// The plugin's message.
        message: String,
    },
    /// The plugin file could not be loaded as a PJRT plugin.
    #[error("cannot load PJRT plugin {path}: {reason}")]
    PluginLoad {
        /// The plugin file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// No plugin could be found or fetched for a target.
    #[error("no PJRT plugin for {target}: {reason}")]
    Provision {
        /// The target (`cpu`, `cuda`, ...).
        target: String,
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
    /// A call was given an argument the C API would reject or abort on.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The plugin returned something radix does not model (e.g. an element
    /// type without a [`crate::ElementType`]).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A filesystem operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// `Result` with the runtime crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
