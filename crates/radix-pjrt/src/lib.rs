//! The PJRT runtime under radix: finds or fetches a PJRT plugin, loads it, and
//! drives it through safe wrappers over the subset of the PJRT C API that radix
//! needs. It knows nothing of tracing: it compiles MLIR text and moves buffers.
//!
//! ```no_run
//! # fn main() -> radix_pjrt::Result<()> {
//! use radix_pjrt::{Client, ClientOptions, CompileOptions, ElementType, ExecuteOptions, Plugin};
//! use radix_pjrt::provision::{Target, locate};
//!
//! let plugin = Plugin::load(&locate(Target::Cpu, None)?)?;
//! let client = Client::new(plugin, &ClientOptions::default())?;
//! let exe = client.compile(
//!     "func.func @main(%a: tensor<f32>) -> tensor<f32> {
//!        %0 = stablehlo.add %a, %a : tensor<f32>
//!        return %0 : tensor<f32>
//!      }",
//!     &CompileOptions::default(),
//! )?;
//! let device = &client.addressable_devices()[0];
//! let x = client.buffer_from_host(&2f32.to_le_bytes(), ElementType::F32, &[], device)?;
//! let out = exe.execute(&[[&x]], &ExecuteOptions::default())?;
//! assert_eq!(out[0][0].to_host_vec()?, 4f32.to_le_bytes());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

/// Calls the PJRT entry point `$name` of `$plugin` (a `&Plugin`) with `$args`
/// (a `&mut` args struct) and converts its error. Unsafe: the args struct
/// must be valid for that call.
macro_rules! call {
    ($plugin:expr, $name:ident, $args:expr) => {{
        let plugin: &$crate::plugin::Plugin = $plugin;
        match plugin.api().$name {
            Some(f) => plugin.check(stringify!($name), f($args)),
            None => Err(plugin.missing(stringify!($name))),
        }
    }};
}

mod buffer;
mod client;
pub mod compile_options;
mod cpu_download;
pub mod custom_call;
mod error;
mod executable;
mod ffi;
mod file_hash;
mod huge_pages;
mod kv_store;
mod named_value;
mod plugin;
mod program_shape;
pub mod provision;
mod select;
mod weight_arena;
mod xla_ffi;

pub use buffer::{Buffer, ElementType, Event, byte_len};
pub use client::{Client, ClientOptions, Device};
pub use compile_options::{CompileOptions, OverrideValue};
pub use error::{Error, Result};
pub use executable::{ExecuteOptions, Execution, LoadedExecutable};
pub use kv_store::{Distributed, KeyValueStore, StoreError};
pub use named_value::{NamedValue, Value};
pub use plugin::{PJRT_API_MAJOR, PJRT_API_MINOR, Plugin};
pub use select::{OpenOptions, open};
