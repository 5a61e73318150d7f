//! Reading weights and tokenizers from model files.
//!
//! This module does IO and nothing else: it knows the file formats (safetensors,
//! GGUF, HF `tokenizer.json`) and hands back host arrays ([`HostTensor`]) and
//! tokenizers, but knows nothing of tracing, devices or model structure. Models
//! look their weights up by name through a [`WeightStore`], which maps the names a
//! model uses to the names a file uses.
//!
//! Invariants:
//! - Files are memory-mapped; a tensor stored in a dtype radix has is handed out
//!   without a copy. GGUF tensors all come out as `f32` (quantized blocks are
//!   dequantized when the tensor is read).
//! - Every malformed input (truncated, corrupt, unsupported) is an [`Error`] that
//!   names the file; nothing here panics on file contents.

mod error;
pub mod gguf;
pub mod safetensors;
mod store;
mod tensor;
pub mod tokenizer;

pub use error::{Error, Result};
pub use gguf::Gguf;
pub use safetensors::Safetensors;
pub use store::{TensorSource, WeightStore};
pub use tensor::HostTensor;
pub use tokenizer::{ChatMessage, Tokenizer};
