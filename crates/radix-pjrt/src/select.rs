//! Opening a client on a chosen or automatically picked target.

use std::path::Path;

use crate::provision::{self, Target};
use crate::{Client, ClientOptions, Plugin, Result};

/// What [`open`] opens: a target (or the automatic choice), a plugin file
/// and the CPU client's device count. Start from [`OpenOptions::AUTO`] or
/// [`OpenOptions::target`] and set what differs:
/// `OpenOptions { cpu_devices: Some(4), ..OpenOptions::target(Target::Cpu) }`.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions<'a> {
    /// The target; `None` picks the first accelerator (CUDA, ROCm, TPU)
    /// whose device files exist ([`Target::has_device_files`]), whose plugin
    /// is already on this machine and which shows a device, else the CPU.
    pub target: Option<Target>,
    /// A plugin file to load instead of the one [`provision::locate`] finds.
    pub plugin: Option<&'a Path>,
    /// The CPU client's device count; `None` leaves the plugin's default.
    pub cpu_devices: Option<i64>,
}

impl OpenOptions<'static> {
    /// The automatic choice of target, with its default plugin and devices.
    pub const AUTO: OpenOptions<'static> = OpenOptions {
        target: None,
        plugin: None,
        cpu_devices: None,
    };

    /// `target`, with its default plugin and devices.
    pub fn target(target: Target) -> OpenOptions<'static> {
        OpenOptions {
            target: Some(target),
            ..OpenOptions::AUTO
        }
    }
}

/// Opens a client as `options` say. Only the CPU plugin is ever fetched by
/// auto-selection.
pub fn open(options: &OpenOptions<'_>) -> Result<Client> {
    let OpenOptions {
        target,
        plugin,
        cpu_devices,
    } = *options;
    let options = ClientOptions {
        cpu_device_count: cpu_devices,
        ..ClientOptions::default()
    };
    if let Some(target) = target {
        let path = provision::locate(target, plugin)?;
        return Client::new(Plugin::load(&path)?, &options);
    }
    if plugin.is_none() {
        let accelerators = [Target::Cuda, Target::Rocm, Target::Tpu];
        for target in accelerators.into_iter().filter(|t| t.has_device_files()) {
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
