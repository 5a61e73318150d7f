//! The one error type of the text crate.

use std::path::PathBuf;

/// A `Result` whose error is an [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong while building or using a tokenizer. Every variant names
/// the file the tokenizer came from.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tokenizer could not be built from its file or metadata.
    #[error("{path}: tokenizer: {reason}")]
    Tokenizer {
        /// The file the tokenizer came from.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// Encoding or decoding text failed, or a chat template is unsupported.
    #[error("tokenizer from {path}: {reason}")]
    Tokenize {
        /// The file the tokenizer came from.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}
