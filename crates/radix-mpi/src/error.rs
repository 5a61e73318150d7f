//! The one error type of the MPI crate.

use std::path::PathBuf;

/// What can go wrong with MPI. Cheap to clone: the world's first failure is
/// kept and handed to every later caller.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The pinned mpich wheel could not be fetched.
    #[error("cannot fetch MPI: {0}")]
    Fetch(String),
    /// The MPI library could not be opened, or lacks a function radix calls.
    #[error(
        "{path}: cannot use it as the MPI library ({reason}); set RADIX_MPI_LIB to a libmpi.so.12 of the MPICH ABI, or unset it to use the pinned mpich wheel"
    )]
    Library {
        /// The library file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// An MPI function returned an error code.
    #[error("{function} failed: {message} (MPI error {code})")]
    Call {
        /// The MPI function.
        function: &'static str,
        /// Its error code.
        code: i32,
        /// The library's text for the code.
        message: String,
    },
    /// Peers did not answer within the deadline: they died, or are stuck
    /// elsewhere.
    #[error(
        "{what}: rank {rank} waited {seconds} s for rank(s) {peers:?}, which did not answer (a peer died or does not run the same collectives; RADIX_MPI_TIMEOUT sets the deadline in seconds)"
    )]
    Timeout {
        /// The collective that waited.
        what: String,
        /// This process's rank.
        rank: usize,
        /// The ranks whose messages did not all arrive.
        peers: Vec<usize>,
        /// The deadline, in seconds.
        seconds: u64,
    },
    /// No rank put a key of the job's key-value store ([`crate::KvStore`])
    /// within the wait.
    #[error("key-value store: rank {rank} waited {seconds} s for key {key:?}, which no rank put")]
    KeyNotPut {
        /// The key, as text (bytes that are not UTF-8 replaced).
        key: String,
        /// This process's rank.
        rank: usize,
        /// How long it waited, in seconds.
        seconds: f64,
    },
    /// An earlier collective failed, so MPI is not used again in this process.
    #[error("MPI is unusable in this process since an earlier failure: {0}")]
    Broken(String),
    /// A job started by [`crate::run_ranks`] could not start, or ran past
    /// its deadline and was killed.
    #[error("MPI job: {0}")]
    Job(String),
    /// A collective was called with buffers or arguments that do not fit.
    #[error("{what}: {reason}")]
    Invalid {
        /// The collective.
        what: String,
        /// What does not fit.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
