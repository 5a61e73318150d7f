//! `Platform`: a PJRT plugin and client to compile for and run on.

use std::path::Path;
use std::sync::Arc;

use radix_pjrt::provision::Target;
use radix_pjrt::{Client, Device};

use crate::Result;

/// Where programs compile and run: a loaded plugin, its client and the
/// device radix uses. Cheap to clone (shared).
#[derive(Clone)]
pub struct Platform {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    client: Client,
}

impl Platform {
    /// An accelerator whose plugin is already on this machine and which shows
    /// a device, else the CPU (whose plugin is fetched on first use).
    pub fn auto() -> Result<Platform> {
        Platform::open(None, None, None)
    }

    /// The host CPU.
    pub fn cpu() -> Result<Platform> {
        Platform::open(Some(Target::Cpu), None, None)
    }

    /// The plugin for `target` (at `plugin` if given, else where
    /// [`radix_pjrt::provision::locate`] finds it) with a default client.
    pub fn new(target: Target, plugin: Option<&Path>) -> Result<Platform> {
        Platform::open(Some(target), plugin, None)
    }

    /// A client on `target`, or on the automatic choice when `None` (see
    /// [`radix_pjrt::open`]); `cpu_devices` sets the CPU device count.
    pub fn open(
        target: Option<Target>,
        plugin: Option<&Path>,
        cpu_devices: Option<i64>,
    ) -> Result<Platform> {
        Ok(Platform::from_client(radix_pjrt::open(
            target,
            plugin,
            cpu_devices,
        )?))
    }

    /// A platform over an existing client.
    pub fn from_client(client: Client) -> Platform {
        let name = client.platform_name().to_ascii_lowercase();
        let target = Target::ALL
            .into_iter()
            .find(|t| name.contains(t.name()) || (*t == Target::Cuda && name.contains("gpu")))
            .unwrap_or(Target::Cpu);
        Platform {
            inner: Arc::new(Inner { target, client }),
        }
    }

    /// What the plugin runs on.
    pub fn target(&self) -> Target {
        self.inner.target
    }

    /// The PJRT client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The device programs run on (the first addressable one).
    pub fn device(&self) -> &Device {
        &self.inner.client.addressable_devices()[0]
    }
}

impl std::fmt::Debug for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Platform({:?}, {})",
            self.inner.target,
            self.inner.client.platform_name()
        )
    }
}
