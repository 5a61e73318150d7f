//! A PJRT client (one per plugin and process, usually) and its devices.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ffi;
use crate::kv_store::{Callbacks, Distributed};
use crate::named_value::{NamedValue, Value};
use crate::plugin::{Plugin, lossy};
use crate::{Error, Result};

/// Options for [`Client::new`].
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// The number of CPU devices a CPU client creates (CPU plugins only; the
    /// plugin's default is one per core, up to a limit). Always passed as an
    /// int64, the only type every CPU plugin accepts without aborting.
    pub cpu_device_count: Option<i64>,
    /// Further plugin-specific create options.
    pub extra: Vec<NamedValue>,
    /// This process's place in a client of several processes: passed as
    /// the options `node_id` and `num_nodes` and the key-value callbacks
    /// (CUDA's plugin builds its NCCL communicators from them).
    pub distributed: Option<Distributed>,
}

/// A PJRT client: the devices of one plugin, and the factory of buffers and
/// executables. Cloning is cheap and shares the client.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) raw: *mut ffi::PJRT_Client,
    pub(crate) plugin: Arc<Plugin>,
    platform_name: String,
    platform_version: String,
    process_index: i32,
    devices: Vec<Device>,
    addressable: Vec<Device>,
    /// Bytes copied from the host into buffers of this client so far.
    pub(crate) host_to_device_bytes: AtomicU64,
    /// What the key-value callbacks reach; dropped after the client is
    /// destroyed (`Drop` runs before the fields are dropped).
    _callbacks: Option<Box<Callbacks>>,
}

// SAFETY: PJRT clients are thread-safe; the remaining fields are plain data.
unsafe impl Send for ClientInner {}
// SAFETY: as above.
unsafe impl Sync for ClientInner {}

/// A device of a [`Client`]. It is a description: it stays valid to read
/// after the client is gone, and a client only accepts its own devices.
#[derive(Debug, Clone)]
pub struct Device {
    pub(crate) raw: *mut ffi::PJRT_Device,
    id: i32,
    process_index: i32,
    local_hardware_id: i32,
    is_addressable: bool,
    kind: String,
}

// SAFETY: `raw` is only an identity here; it is dereferenced by the plugin only
// after the owning client checked it is one of its devices.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl PartialEq for Device {
    fn eq(&self, other: &Device) -> bool {
        self.raw == other.raw && self.id == other.id
    }
}

impl Eq for Device {}

impl Device {
    /// The global device id.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The device kind, e.g. `cpu`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The index of the process that owns the device.
    pub fn process_index(&self) -> i32 {
        self.process_index
    }

    /// Whether this process can put buffers on the device.
    pub fn is_addressable(&self) -> bool {
        self.is_addressable
    }

    /// The plugin's local hardware id (-1 where it has none).
    pub fn local_hardware_id(&self) -> i32 {
        self.local_hardware_id
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("platform", &self.inner.platform_name)
            .field("devices", &self.inner.devices.len())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Creates a client of `plugin`.
    pub fn new(plugin: Arc<Plugin>, options: &ClientOptions) -> Result<Client> {
        let mut named: Vec<NamedValue> = Vec::with_capacity(options.extra.len() + 1);
        if let Some(n) = options.cpu_device_count {
            if n < 1 {
                return Err(Error::InvalidArgument(format!(
                    "cpu_device_count must be at least 1, got {n}"
                )));
            }
            named.push(NamedValue::new("cpu_device_count", Value::Int64(n)));
        }
        for nv in &options.extra {
            if nv.name == "cpu_device_count" {
                let ok = matches!(nv.value, Value::Int64(n) if n >= 1)
                    && options.cpu_device_count.is_none();
                if !ok {
                    return Err(Error::InvalidArgument(format!(
                        "client option cpu_device_count must be given once, as an int64 >= 1 (got {})",
                        nv.value
                    )));
                }
            }
            if options.distributed.is_some() && ["node_id", "num_nodes"].contains(&&*nv.name) {
                return Err(Error::InvalidArgument(format!(
                    "client option {} is given twice: in extra and by distributed",
                    nv.name
                )));
            }
            named.push(nv.clone());
        }
        if let Some(d) = &options.distributed {
            // `Distributed::new` checked that both fit an i64.
            named.push(NamedValue::new("node_id", Value::Int64(d.node_id() as i64)));
            named.push(NamedValue::new(
                "num_nodes",
                Value::Int64(d.num_nodes() as i64),
            ));
        }
        let raw_options: Vec<ffi::PJRT_NamedValue> = named.iter().map(NamedValue::to_ffi).collect();
        let mut args = ffi::PJRT_Client_Create_Args::new();
        args.create_options = raw_options.as_ptr();
        args.num_options = raw_options.len();
        let callbacks = options
            .distributed
            .as_ref()
            .map(|d| Callbacks::new(d.store().clone()));
        if let Some(c) = &callbacks {
            c.install(&mut args);
        }
        // SAFETY: the options borrow `named`, alive across the call; the
        // callbacks' user arg is kept by the client (below) as long as the
        // plugin's client lives.
        unsafe { call!(&plugin, PJRT_Client_Create, &mut args) }?;
        let raw = args.client;
        if raw.is_null() {
            return Err(Error::Pjrt {
                call: "PJRT_Client_Create",
                code: "INTERNAL",
                message: "the plugin returned no client".into(),
            });
        }
        // From here on, `Drop` for `ClientInner` destroys the client.
        let mut inner = ClientInner {
            raw,
            plugin,
            platform_name: String::new(),
            platform_version: String::new(),
            process_index: 0,
            devices: Vec::new(),
            addressable: Vec::new(),
            host_to_device_bytes: AtomicU64::new(0),
            _callbacks: callbacks,
        };
        inner.describe()?;
        Ok(Client {
            inner: Arc::new(inner),
        })
    }

    /// The plugin behind this client.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.inner.plugin
    }

    /// How many bytes [`Client::buffer_from_host`] has copied to this
    /// client's devices so far (what a model's weights cost to upload).
    pub fn host_to_device_bytes(&self) -> u64 {
        self.inner.host_to_device_bytes.load(Ordering::Relaxed)
    }

    /// The platform name, e.g. `cpu` or `cuda`.
    pub fn platform_name(&self) -> &str {
        &self.inner.platform_name
    }

    /// The platform version string.
    pub fn platform_version(&self) -> &str {
        &self.inner.platform_version
    }

    /// The index of this process among the client's processes.
    pub fn process_index(&self) -> i32 {
        self.inner.process_index
    }

    /// All devices, including those of other processes.
    pub fn devices(&self) -> &[Device] {
        &self.inner.devices
    }

    /// The devices this process can use.
    pub fn addressable_devices(&self) -> &[Device] {
        &self.inner.addressable
    }
}

impl ClientInner {
    /// Whether this is the CPU plugin, whose device memory is host memory.
    pub(crate) fn is_cpu(&self) -> bool {
        self.platform_name == "cpu"
    }

    fn describe(&mut self) -> Result<()> {
        let plugin = self.plugin.clone();
        let p = &*plugin;
        let mut name = ffi::PJRT_Client_PlatformName_Args::new();
        name.client = self.raw;
        // SAFETY: valid args; the string lives as long as the client.
        unsafe { call!(p, PJRT_Client_PlatformName, &mut name) }?;
        // SAFETY: as returned by the plugin.
        self.platform_name = unsafe { lossy(name.platform_name, name.platform_name_size) };
        let mut version = ffi::PJRT_Client_PlatformVersion_Args::new();
        version.client = self.raw;
        // SAFETY: as above.
        unsafe { call!(p, PJRT_Client_PlatformVersion, &mut version) }?;
        // SAFETY: as returned by the plugin.
        self.platform_version =
            unsafe { lossy(version.platform_version, version.platform_version_size) };
        let mut index = ffi::PJRT_Client_ProcessIndex_Args::new();
        index.client = self.raw;
        // SAFETY: valid args.
        unsafe { call!(p, PJRT_Client_ProcessIndex, &mut index) }?;
        self.process_index = index.process_index;

        let mut all = ffi::PJRT_Client_Devices_Args::new();
        all.client = self.raw;
        // SAFETY: valid args; the array lives as long as the client.
        unsafe { call!(p, PJRT_Client_Devices, &mut all) }?;
        // SAFETY: the plugin returned `num_devices` device pointers.
        let raw_all = unsafe { raw_slice(all.devices, all.num_devices) };
        self.devices = raw_all
            .iter()
            .map(|&d| describe_device(p, d))
            .collect::<Result<_>>()?;

        let mut mine = ffi::PJRT_Client_AddressableDevices_Args::new();
        mine.client = self.raw;
        // SAFETY: as above.
        unsafe { call!(p, PJRT_Client_AddressableDevices, &mut mine) }?;
        // SAFETY: as above.
        let raw_mine = unsafe { raw_slice(mine.addressable_devices, mine.num_addressable_devices) };
        self.addressable = raw_mine
            .iter()
            .map(|&d| match self.devices.iter().find(|dev| dev.raw == d) {
                Some(dev) => Ok(dev.clone()),
                None => describe_device(p, d),
            })
            .collect::<Result<_>>()?;
        Ok(())
    }

    /// This client's description of the device `raw`, if it is one of its own.
    pub(crate) fn device_by_raw(&self, raw: *mut ffi::PJRT_Device) -> Option<&Device> {
        self.addressable
            .iter()
            .chain(&self.devices)
            .find(|d| d.raw == raw)
    }

    /// Checks that `device` is an addressable device of this client.
    pub(crate) fn own_device(&self, device: &Device) -> Result<*mut ffi::PJRT_Device> {
        if self.addressable.iter().any(|d| d == device) {
            Ok(device.raw)
        } else {
            Err(Error::InvalidArgument(format!(
                "device {} ({}) is not an addressable device of this client",
                device.id, device.kind
            )))
        }
    }
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Client_Destroy_Args::new();
        args.client = self.raw;
        // SAFETY: every buffer and executable holds an `Arc<ClientInner>`, so
        // none is left; the client is destroyed once.
        if let Err(e) = unsafe { call!(&self.plugin, PJRT_Client_Destroy, &mut args) } {
            tracing::warn!("{e}");
        }
    }
}

fn describe_device(p: &Plugin, raw: *mut ffi::PJRT_Device) -> Result<Device> {
    let mut desc = ffi::PJRT_Device_GetDescription_Args::new();
    desc.device = raw;
    // SAFETY: `raw` is a device of a live client.
    unsafe { call!(p, PJRT_Device_GetDescription, &mut desc) }?;
    let d = desc.device_description;
    let mut id = ffi::PJRT_DeviceDescription_Id_Args::new();
    id.device_description = d;
    // SAFETY: valid args.
    unsafe { call!(p, PJRT_DeviceDescription_Id, &mut id) }?;
    let mut process = ffi::PJRT_DeviceDescription_ProcessIndex_Args::new();
    process.device_description = d;
    // SAFETY: valid args.
    unsafe { call!(p, PJRT_DeviceDescription_ProcessIndex, &mut process) }?;
    let mut kind = ffi::PJRT_DeviceDescription_Kind_Args::new();
    kind.device_description = d;
    // SAFETY: valid args; the string lives as long as the device.
    unsafe { call!(p, PJRT_DeviceDescription_Kind, &mut kind) }?;
    let mut addressable = ffi::PJRT_Device_IsAddressable_Args::new();
    addressable.device = raw;
    // SAFETY: valid args.
    unsafe { call!(p, PJRT_Device_IsAddressable, &mut addressable) }?;
    let mut hw = ffi::PJRT_Device_LocalHardwareId_Args::new();
    hw.device = raw;
    // SAFETY: valid args.
    unsafe { call!(p, PJRT_Device_LocalHardwareId, &mut hw) }?;
    Ok(Device {
        raw,
        id: id.id,
        process_index: process.process_index,
        local_hardware_id: hw.local_hardware_id,
        is_addressable: addressable.is_addressable,
        // SAFETY: as returned by the plugin.
        kind: unsafe { lossy(kind.device_kind, kind.device_kind_size) },
    })
}

/// A slice over a plugin-owned array, empty when the pointer is null.
///
/// # Safety
/// `ptr` is null or points to `n` valid elements that outlive the slice's use.
pub(crate) unsafe fn raw_slice<'a, T>(ptr: *const T, n: usize) -> &'a [T] {
    if ptr.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { std::slice::from_raw_parts(ptr, n) }
    }
}
