//! The error type of [`crate::io`].

use std::path::PathBuf;

use crate::DType;

/// A `Result` whose error is an [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong while reading a model file. Every variant that comes from a
/// file names it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened, mapped or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a well-formed safetensors file (or shard index).
    #[error("{path}: not a valid safetensors file: {reason}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The file is not a well-formed GGUF file.
    #[error("{path}: not a valid GGUF file: {reason}")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A tensor is stored in a type radix cannot read.
    #[error("{path}: tensor `{tensor}` has type {ty}, which radix cannot load ({supported})")]
    UnsupportedType {
        /// The file.
        path: PathBuf,
        /// The tensor's name in the file.
        tensor: String,
        /// The stored type's name in the file format (`Q4_K`, `F8_E4M3`, ...).
        ty: String,
        /// The types this format's reader supports.
        supported: &'static str,
    },
    /// A tensor is stored in another block format than the model was built for.
    #[error(
        "{path}: tensor `{name}` (stored name `{stored}`) is {found}, the model expects {expected}"
    )]
    FormatMismatch {
        /// The file.
        path: PathBuf,
        /// The name the model asked for (its field path).
        name: String,
        /// The name after the store's name mapping.
        stored: String,
        /// The format the model expects.
        expected: &'static str,
        /// The format in the file.
        found: &'static str,
    },
    /// No source holds the tensor a model asked for.
    #[error("tensor `{name}` (stored name `{stored}`) not found in {files}")]
    MissingTensor {
        /// The name the model asked for (its field path).
        name: String,
        /// The name after the store's name mapping.
        stored: String,
        /// The files searched, comma-separated.
        files: String,
    },
    /// A tensor's stored shape differs from the one the model expects.
    #[error(
        "{path}: tensor `{name}` (stored name `{stored}`) has shape {found:?}, expected {expected:?}"
    )]
    ShapeMismatch {
        /// The file holding the tensor.
        path: PathBuf,
        /// The name the model asked for (its field path).
        name: String,
        /// The name after the store's name mapping.
        stored: String,
        /// The shape the model expects.
        expected: Vec<i64>,
        /// The shape stored in the file.
        found: Vec<i64>,
    },
    /// A host array was viewed as a Rust type of another dtype.
    #[error("tensor has dtype {found}, viewed as {asked}")]
    DTypeMismatch {
        /// The tensor's dtype.
        found: DType,
        /// The dtype of the requested Rust type.
        asked: DType,
    },
    /// A host array's bytes are not aligned for a zero-copy view (use `to_vec`).
    #[error(
        "tensor data at address {addr:#x} is not aligned to {align} bytes for a {dtype} view; use `to_vec`"
    )]
    Misaligned {
        /// The address of the data.
        addr: usize,
        /// The alignment the view needs.
        align: usize,
        /// The tensor's dtype.
        dtype: DType,
    },
}
