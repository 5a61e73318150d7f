//! Opening a client on a chosen or automatically picked target.

use std::path::Path;

use crate::provision::{self, Target};
use crate::{Client, ClientOptions, Distributed, Plugin, Result};

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
    /// This process's place in a CUDA client of several processes
    /// ([`ClientOptions::distributed`]); other plugins get nothing (the
    /// CPU plugin moves no data between processes).
    pub distributed: Option<&'a Distributed>,
}

impl OpenOptions<'static> {
    /// The automatic choice of target, with its default plugin and devices.
    pub const AUTO: OpenOptions<'static> = OpenOptions {
        target: None,
        plugin: None,
        cpu_devices: None,
        distributed: None,
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
        distributed,
    } = *options;
    let options = ClientOptions {
        cpu_device_count: cpu_devices,
        ..ClientOptions::default()
    };
    let for_target = |target: Target| ClientOptions {
        distributed: distributed.filter(|_| target == Target::Cuda).cloned(),
        ..options.clone()
    };
    if let Some(target) = target {
        let path = provision::locate(target, plugin)?;
        let plugin = load(target, &path)?;
        return match target {
            Target::Cpu => cpu_client(plugin, options),
            _ => Client::new(plugin, &for_target(target)),
        };
    }
    if plugin.is_none() {
        let accelerators = [Target::Cuda, Target::Rocm, Target::Tpu];
        for target in accelerators.into_iter().filter(|t| t.has_device_files()) {
            let Ok(Some((path, _))) = provision::find(target, None) else {
                continue;
            };
            match load(target, &path).and_then(|p| Client::new(p, &for_target(target))) {
                Ok(client) if !client.addressable_devices().is_empty() => return Ok(client),
                Ok(_) => tracing::info!("{target} plugin {} sees no device", path.display()),
                Err(e) => tracing::info!("{target} plugin {} unusable: {e}", path.display()),
            }
        }
    }
    let path = provision::locate(Target::Cpu, plugin)?;
    cpu_client(Plugin::load(&path)?, options)
}

/// The plugin of `target` at `path`, its libraries opened first
/// ([`provision::PluginSpec::preload`]).
fn load(target: Target, path: &Path) -> Result<std::sync::Arc<Plugin>> {
    provision::spec(target).preload(path)?;
    Plugin::load(path)
}

/// A CPU client that runs each execution on the calling thread
/// (`asynchronous = false`). radix waits for every result it starts (a
/// decode step needs its logits), so XLA's hand-off of each execution to a
/// worker thread and back only adds two thread switches per call: measured
/// on a 2-core Xeon, SmolLM2 decoded at 37 tokens/s synchronously against
/// 27 asynchronously (32 executions per token). A plugin that does not know
/// the option (older CPU plugins check option names) gets the client
/// without it.
fn cpu_client(plugin: std::sync::Arc<Plugin>, options: ClientOptions) -> Result<Client> {
    let mut sync = options.clone();
    sync.extra.push(crate::NamedValue::new(
        "asynchronous",
        crate::Value::Bool(false),
    ));
    Client::new(plugin.clone(), &sync).or_else(|e| {
        tracing::info!("the CPU plugin refuses asynchronous = false ({e}): running asynchronously");
        Client::new(plugin, &options)
    })
}
