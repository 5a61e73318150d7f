//! The error type of the models crate.

/// A models-crate result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Fetching a model package failed.
    #[error(transparent)]
    Fetch(#[from] radix_pjrt::Error),
    /// Reading a model file (weights, tokenizer) failed.
    #[error(transparent)]
    Io(#[from] radix::io::Error),
    /// Loading the weights onto the device failed.
    #[error(transparent)]
    Load(#[from] radix::nn::LoadError),
    /// Tracing, compiling or running failed.
    #[error(transparent)]
    Radix(#[from] radix::Error),
    /// A configuration file could not be read or parsed.
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The caller's input does not fit the model (wrong size, empty batch).
    #[error("input: {0}")]
    Input(String),
}
