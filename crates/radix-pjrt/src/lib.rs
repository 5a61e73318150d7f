//! The PJRT runtime under radix: finds or fetches a PJRT plugin, loads it, and
//! drives it through safe wrappers over the subset of the PJRT C API that radix
//! needs. It knows nothing of tracing: it compiles MLIR text and moves buffers.

mod error;
pub mod provision;

pub use error::{Error, Result};
