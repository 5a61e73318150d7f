//! Host arrays and the files that hold them: element types ([`DType`],
//! [`Element`]) and reading weights from model files.
//!
//! This crate does IO and nothing else: it knows the file formats (safetensors,
//! GGUF) and hands back host arrays ([`HostTensor`]) and GGUF metadata, but
//! knows nothing of tracing, devices, model structure or text (tokenizers
//! live in the `radix-text` crate, which reads GGUF metadata through this
//! one without linking the compiler). `radix` re-exports it as `radix::io`.
//! Models look their weights up by name through a [`WeightStore`], which
//! maps the names a model uses to the names a file uses.
//!
//! Invariants:
//! - Files are memory-mapped; a tensor stored in a dtype radix has is handed out
//!   without a copy. GGUF tensors all come out as `f32` (quantized blocks are
//!   dequantized when the tensor is read).
//! - Every malformed input (truncated, corrupt, unsupported) is an [`Error`] that
//!   names the file; nothing here panics on file contents.

#![warn(missing_docs)]

pub mod attr;
pub mod dtype;
mod error;
pub mod gguf;
pub mod safetensors;
mod store;
mod tensor;

pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use gguf::Gguf;
pub use safetensors::Safetensors;
pub use store::{TensorSource, WeightStore};
pub use tensor::HostTensor;

/// Opens and memory-maps `path` read-only; a failure names the file.
fn map_file(path: &std::path::Path) -> Result<memmap2::Mmap> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the map is read-only; like every mmap-based loader we assume the
    // file is not modified while it is mapped.
    unsafe { memmap2::Mmap::map(&file) }.map_err(io)
}
