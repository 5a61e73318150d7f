//! Finding a PJRT plugin on this machine, or fetching the pinned one.
//! (Being written: for now only an explicit path and `RADIX_PJRT_PLUGIN` work.)

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// What a plugin runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// The host CPU.
    Cpu,
    /// NVIDIA GPUs.
    Cuda,
    /// AMD GPUs.
    Rocm,
    /// Google TPUs.
    Tpu,
}

/// The plugin file for `target`: `explicit` if given, else `RADIX_PJRT_PLUGIN`,
/// the radix cache, installed Python packages, and last a fetch of the pinned wheel.
pub fn locate(target: Target, explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("RADIX_PJRT_PLUGIN") {
        return Ok(PathBuf::from(p));
    }
    Err(Error::Provision { target: format!("{target:?}"), reason: "set RADIX_PJRT_PLUGIN".into() })
}
