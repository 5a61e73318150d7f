//! The error type of the models crate.

/// A models-crate result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while loading or running a model. The errors of the
/// layers below are boxed: they carry paths, names and shapes, and a small
/// `Err` keeps every `Result` of this crate cheap to return.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Fetching a model package failed.
    #[error(transparent)]
    Fetch(Box<radix_fetch::Error>),
    /// Reading a weights file failed.
    #[error(transparent)]
    Io(Box<radix::io::Error>),
    /// Building or using a tokenizer failed.
    #[error(transparent)]
    Text(Box<radix_text::Error>),
    /// Loading the weights onto the device failed.
    #[error(transparent)]
    Load(Box<radix::nn::LoadError>),
    /// Tracing, compiling or running failed.
    #[error(transparent)]
    Radix(Box<radix::Error>),
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

macro_rules! boxed_from {
    ($($variant:ident($ty:ty)),*) => {$(
        impl From<$ty> for Error {
            fn from(e: $ty) -> Error {
                Error::$variant(Box::new(e))
            }
        }
    )*};
}

boxed_from!(
    Fetch(radix_fetch::Error),
    Io(radix::io::Error),
    Text(radix_text::Error),
    Load(radix::nn::LoadError),
    Radix(radix::Error)
);
