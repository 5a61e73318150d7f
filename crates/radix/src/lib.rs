//! radix: write a model as Rust structs of tensors, trace its `forward` into
//! StableHLO, compile it through a PJRT plugin and run it on device buffers.

pub mod dtype;
pub mod io;

pub use dtype::{DType, Element};
