//! Text for radix models: a [`Tokenizer`] built from an HF `tokenizer.json`
//! or from the BPE vocabulary embedded in a GGUF file, and the chat templates
//! of instruct models ([`ChatMessage`], [`Tokenizer::chat_prompt`]).
//!
//! This crate sits above the core `radix` crate, which knows nothing of text:
//! a user tracing a model does not compile the `tokenizers` crate. It only
//! reads GGUF metadata through [`radix::io::Gguf`]; it knows nothing of
//! tracing, devices or models.

#![warn(missing_docs)]

mod error;
pub mod tokenizer;

pub use error::{Error, Result};
pub use tokenizer::{ChatMessage, Tokenizer};
