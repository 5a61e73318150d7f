//! Opening a client on a chosen or automatically picked target.

use std::path::Path;

use crate::provision::{self, Target};
use crate::{Client, ClientOptions, Plugin, Result};

/// Opens a client on `target`, or, when `target` is `None`, on the first
/// accelerator (CUDA, ROCm, TPU) whose plugin is already on this machine and
/// which shows a device, else on the CPU. Only the CPU plugin is ever fetched
/// by auto-selection. `plugin` overrides the plugin file; `cpu_devices` sets the
/// CPU client's device count.
pub fn open(
    target: Option<Target>,
    plugin: Option<&Path>,
    cpu_devices: Option<i64>,
) -> Result<Client> {
    let options = ClientOptions {
        cpu_device_count: cpu_devices,
        ..ClientOptions::default()
    };
    if let Some(target) = target {
        let path = provision::locate(target, plugin)?;
        return Client::new(Plugin::load(&path)?, &options);
    }
    if plugin.is_none() {
        for target in [Target::Cuda, Target::Rocm, Target::Tpu] {
            let Ok(Some((path, _))) = provision::find(target, None) else {
                continue;
            };
            match Plugin::load(&path).and_then(|p| Client::new(p, &options)) {
                Ok(client) if !client.addressable_devices().is_empty() => return Ok(client),
                Ok(_) => tracing::info!("{target} plugin {} sees no device", path.display()),
                Err(e) => tracing::info!("{target} plugin {} unusable: {e}", path.display()),
            }
        }
    }
    let path = provision::locate(Target::Cpu, plugin)?;
    Client::new(Plugin::load(&path)?, &options)
}
