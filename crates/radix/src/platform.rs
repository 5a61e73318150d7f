//! `Platform`: a PJRT plugin and client to compile for and run on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use radix_pjrt::provision::{Target, locate};
use radix_pjrt::{Client, ClientOptions, Device, Plugin};

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
    /// An accelerator if a plugin for one is found and it has a device, else the CPU.
    pub fn auto() -> Result<Platform> {
        for target in [Target::Cuda, Target::Rocm, Target::Tpu] {
            if let Ok(p) = Platform::new(target, None)
                && !p.client().addressable_devices().is_empty()
                && !p.client().platform_name().eq_ignore_ascii_case("cpu")
            {
                return Ok(p);
            }
        }
        Platform::cpu()
    }

    /// The host CPU.
    pub fn cpu() -> Result<Platform> {
        Platform::new(Target::Cpu, None)
    }

    /// The plugin for `target` (at `plugin` if given, else where
    /// [`radix_pjrt::provision::locate`] finds it) with a default client.
    pub fn new(target: Target, plugin: Option<&Path>) -> Result<Platform> {
        let path = locate(target, plugin)?;
        let client = Client::new(load(&path)?, &ClientOptions::default())?;
        Ok(Platform {
            inner: Arc::new(Inner { target, client }),
        })
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

/// Loads a plugin once per path per process.
fn load(path: &Path) -> Result<Arc<Plugin>> {
    static PLUGINS: OnceLock<Mutex<HashMap<PathBuf, Arc<Plugin>>>> = OnceLock::new();
    let mut plugins = PLUGINS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = plugins.get(path) {
        return Ok(p.clone());
    }
    let p = Plugin::load(path)?;
    plugins.insert(path.to_path_buf(), p.clone());
    Ok(p)
}
