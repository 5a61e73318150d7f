//! Text for radix models: a [`Tokenizer`] built from an HF `tokenizer.json`
//! or from the vocabulary embedded in a GGUF file (byte-level BPE or
//! SentencePiece), and the chat templates of instruct models
//! ([`ChatTemplate`], rendered with a Jinja engine; [`Tokenizer::chat_prompt`]).
//!
//! This crate sits beside the core `radix` crate, which knows nothing of
//! text: a user tracing a model does not compile the `tokenizers` crate, and
//! a user of the tokenizers does not compile the compiler. It reads GGUF
//! metadata through [`radix_io::Gguf`] and knows nothing of tracing, devices
//! or models.

#![warn(missing_docs)]

mod chat;
mod error;
mod gguf_vocab;
pub mod tokenizer;

pub use chat::{ChatMessage, ChatTemplate, TemplateOrigin};
pub use error::{Error, Result};
pub use gguf_vocab::turn_end_ids;
pub use tokenizer::Tokenizer;
