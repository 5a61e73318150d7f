//! radix: write a model as Rust structs of tensors, trace its `forward` into
//! StableHLO, compile it through a PJRT plugin and run it on device buffers.
//!
//! ```no_run
//! # fn main() -> radix::Result<()> {
//! use radix::{Buffer, DType, Platform, Shape, Tensor};
//! let platform = Platform::cpu()?;
//! let shape = Shape::tagged(DType::F32, &[("b", 2), ("d", 3)]);
//! let exe = radix::compile_fn(&platform, &Tensor::param(shape), |x| x.softmax("d"))?;
//! let x = Buffer::from_slice(&platform, &[1f32, 2., 3., 4., 5., 6.], shape)?;
//! let y = exe.call_fn(x)?;
//! assert_eq!(y.shape(), shape);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

extern crate self as radix;

mod autodiff;
mod buffer;
pub mod cache;
pub mod collective;
mod compile;
mod compile_config;
pub mod custom_call;
mod donation;
pub mod dtype;
pub mod dump;
mod error;
mod exe;
pub mod host_callback;
pub use radix_ir as ir;
use radix_ir::literal;
pub mod module;
pub mod nn;
pub mod optim;
use radix_ir::passes;
mod platform;
mod program;
pub mod quant;
pub mod shard_map;
pub use radix_ir::shape;
pub use radix_ir::sharding;
mod tensor;
pub mod testing;

pub use buffer::Buffer;
pub use cache::{CacheEntry, CacheKey, ExecutableCache, Origin};
pub use compile::{
    cache_key, compile, compile_fn, compile_program, compile_program_with, trace, trace_fn,
};
pub use compile_config::{CacheMode, CompileConfig, platform_env_overrides};
pub use custom_call::{Attrs, CustomCall, CustomCallMode};
pub use dtype::{DType, Element};
pub use dump::{DumpConfig, XlaDump};
pub use error::{Error, Result, TraceError};
pub use exe::{Compiled, Executable};
pub use host_callback::host_callback;
/// Host arrays and the model files that hold them (the `radix-io` crate).
pub use radix_io as io;

pub use ir::ops::dot::DotDims;
pub use ir::ops::shape_ops::{PadSpec, SliceRange, SliceSpec};
pub use ir::ops::{Binary, Compare, Order, Unary, Window};
pub use literal::Literal;
pub use module::{Bufferized, Module, Shapes};
pub use platform::Platform;
pub use program::{ArgSpec, Program};
pub use radix_macros::Module;
pub use shape::{Axes, AxisRef, Shape, Size, Tag};
pub use tensor::Tensor;
pub use tensor::control::{
    call, checkpoint, for_, if_, optimization_barrier, while_, while_bounded,
};
pub use tensor::grad::{grad, value_and_grad, vjp};
pub use tensor::reduce::reduce;
pub use tensor::sort::sort;
