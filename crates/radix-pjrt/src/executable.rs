//! Compiling MLIR into a loaded executable, running it, and serializing it.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::buffer::{Buffer, ElementType, Event, await_raw, destroy_event, no_result};
use crate::client::{Client, ClientInner, Device, raw_slice};
use crate::compile_options::CompileOptions;
use crate::ffi;
use crate::plugin::{Plugin, lossy};
use crate::program_shape::{ParamShape, parameter_shapes};
use crate::{Error, Result};

/// A compiled program loaded on its devices. Thread-safe, as PJRT's are.
pub struct LoadedExecutable {
    raw: NonNull<ffi::PJRT_LoadedExecutable>,
    exe: NonNull<ffi::PJRT_Executable>,
    client: Arc<ClientInner>,
    name: String,
    num_outputs: usize,
    num_partitions: usize,
    num_replicas: usize,
    devices: Vec<Device>,
    params: Option<Vec<ParamShape>>,
}

// SAFETY: PJRT executables are thread-safe; the rest is plain data.
unsafe impl Send for LoadedExecutable {}
// SAFETY: as above.
unsafe impl Sync for LoadedExecutable {}

/// Options for one execution.
#[derive(Debug, Clone, Default)]
pub struct ExecuteOptions {
    /// Arguments not to donate even where the program aliases them to an
    /// output (`tf.aliasing_output`); the plugin copies instead.
    pub non_donatable_input_indices: Vec<i64>,
}

/// The results of an execution started by [`LoadedExecutable::execute_async`]:
/// the output buffers, one list per device, and one completion event per device.
#[derive(Debug)]
pub struct Execution {
    /// The outputs, `[device][output]`.
    pub outputs: Vec<Vec<Buffer>>,
    /// One event per device, ready when that device's execution is done.
    pub done: Vec<Event>,
}

impl Execution {
    /// Waits for every device and returns the outputs, or the first error.
    pub fn wait(self) -> Result<Vec<Vec<Buffer>>> {
        let mut res = Ok(());
        for e in &self.done {
            let r = e.wait();
            if res.is_ok() {
                res = r;
            }
        }
        res.map(|()| self.outputs)
    }
}

impl std::fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedExecutable")
            .field("name", &self.name)
            .field("num_outputs", &self.num_outputs)
            .field("devices", &self.devices.len())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Compiles a StableHLO module given as MLIR text (pretty or generic form)
    /// or bytecode, with `options`, and loads it on its devices.
    pub fn compile(&self, mlir: &str, options: &CompileOptions) -> Result<LoadedExecutable> {
        self.compile_program(mlir.as_bytes(), "mlir", options)
    }

    /// Compiles `code` in the PJRT program `format` (`mlir` for StableHLO
    /// text or bytecode, `hlo` for a serialized `HloModuleProto`).
    pub fn compile_program(
        &self,
        code: &[u8],
        format: &str,
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        let options = options.to_bytes()?;
        let inner = &self.inner;
        let mut program = ffi::PJRT_Program::new();
        program.code = code.as_ptr().cast_mut().cast();
        program.code_size = code.len();
        program.format = format.as_ptr().cast();
        program.format_size = format.len();
        let mut args = ffi::PJRT_Client_Compile_Args::new();
        args.client = inner.raw;
        args.program = &program;
        args.compile_options = options.as_ptr().cast();
        args.compile_options_size = options.len();
        // SAFETY: the program and options outlive the call, which does not
        // write to `code`; the options have replicas and partitions >= 1.
        unsafe { call!(&inner.plugin, PJRT_Client_Compile, &mut args) }?;
        // SAFETY: a fresh executable owned by us.
        unsafe { LoadedExecutable::from_raw(inner, args.executable, "PJRT_Client_Compile") }
    }

    /// Loads an executable serialized by [`LoadedExecutable::serialize`] with
    /// the same plugin build.
    pub fn deserialize_and_load(&self, bytes: &[u8]) -> Result<LoadedExecutable> {
        if bytes.is_empty() {
            return Err(Error::InvalidArgument("empty serialized executable".into()));
        }
        let inner = &self.inner;
        let mut args = ffi::PJRT_Executable_DeserializeAndLoad_Args::new();
        args.client = inner.raw;
        args.serialized_executable = bytes.as_ptr().cast();
        args.serialized_executable_size = bytes.len();
        // SAFETY: `bytes` outlives the call.
        unsafe { call!(&inner.plugin, PJRT_Executable_DeserializeAndLoad, &mut args) }?;
        // SAFETY: a fresh executable owned by us.
        unsafe {
            LoadedExecutable::from_raw(
                inner,
                args.loaded_executable,
                "PJRT_Executable_DeserializeAndLoad",
            )
        }
    }
}

impl LoadedExecutable {
    /// Wraps a fresh loaded executable and reads what `execute` needs.
    ///
    /// # Safety
    /// `raw` is null or a loaded executable of `client` owned by the caller.
    unsafe fn from_raw(
        client: &Arc<ClientInner>,
        raw: *mut ffi::PJRT_LoadedExecutable,
        call: &'static str,
    ) -> Result<LoadedExecutable> {
        let raw = NonNull::new(raw).ok_or_else(|| no_result(call, "executable"))?;
        let p = &*client.plugin;
        let mut get = ffi::PJRT_LoadedExecutable_GetExecutable_Args::new();
        get.loaded_executable = raw.as_ptr();
        // SAFETY: valid args on a live executable.
        let got = unsafe { call!(p, PJRT_LoadedExecutable_GetExecutable, &mut get) };
        let exe = match got.and_then(|()| {
            NonNull::new(get.executable)
                .ok_or_else(|| no_result("PJRT_LoadedExecutable_GetExecutable", "executable"))
        }) {
            Ok(exe) => exe,
            Err(e) => {
                // SAFETY: we own `raw` and give up on it.
                unsafe { destroy_loaded(p, raw.as_ptr()) };
                return Err(e);
            }
        };
        // From here on `Drop` frees both handles.
        let mut res = LoadedExecutable {
            raw,
            exe,
            client: client.clone(),
            name: String::new(),
            num_outputs: 0,
            num_partitions: 1,
            num_replicas: 1,
            devices: Vec::new(),
            params: None,
        };
        let e = exe.as_ptr();
        let mut name = ffi::PJRT_Executable_Name_Args::new();
        name.executable = e;
        // SAFETY: valid args; the name lives as long as the executable.
        unsafe { call!(p, PJRT_Executable_Name, &mut name) }?;
        // SAFETY: as returned by the plugin.
        res.name = unsafe { lossy(name.executable_name, name.executable_name_size) };
        let mut outputs = ffi::PJRT_Executable_NumOutputs_Args::new();
        outputs.executable = e;
        // SAFETY: valid args.
        unsafe { call!(p, PJRT_Executable_NumOutputs, &mut outputs) }?;
        res.num_outputs = outputs.num_outputs;
        let mut partitions = ffi::PJRT_Executable_NumPartitions_Args::new();
        partitions.executable = e;
        // SAFETY: valid args.
        unsafe { call!(p, PJRT_Executable_NumPartitions, &mut partitions) }?;
        res.num_partitions = partitions.num_partitions;
        let mut replicas = ffi::PJRT_Executable_NumReplicas_Args::new();
        replicas.executable = e;
        // SAFETY: valid args.
        unsafe { call!(p, PJRT_Executable_NumReplicas, &mut replicas) }?;
        res.num_replicas = replicas.num_replicas;
        let mut devices = ffi::PJRT_LoadedExecutable_AddressableDevices_Args::new();
        devices.executable = raw.as_ptr();
        // SAFETY: valid args; the array lives as long as the executable.
        unsafe { call!(p, PJRT_LoadedExecutable_AddressableDevices, &mut devices) }?;
        // SAFETY: as returned by the plugin.
        let raw_devices =
            unsafe { raw_slice(devices.addressable_devices, devices.num_addressable_devices) };
        res.devices = raw_devices
            .iter()
            .map(|&d| {
                client.device_by_raw(d).cloned().ok_or_else(|| {
                    no_result(
                        "PJRT_LoadedExecutable_AddressableDevices",
                        "device of this client",
                    )
                })
            })
            .collect::<Result<_>>()?;
        res.params = parameter_shapes(p, e);
        Ok(res)
    }

    /// The program's name (the MLIR module's name, or `main`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of outputs per device.
    pub fn num_outputs(&self) -> usize {
        self.num_outputs
    }

    /// The number of partitions it was compiled for.
    pub fn num_partitions(&self) -> usize {
        self.num_partitions
    }

    /// The number of replicas it was compiled for.
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }

    /// The number of parameters per device, where the plugin tells.
    pub fn num_parameters(&self) -> Option<usize> {
        self.params.as_ref().map(Vec::len)
    }

    /// The element type (`None` for a type radix does not model) and the
    /// dimensions of parameter `i` per device, where the plugin tells.
    pub fn parameter_shape(&self, i: usize) -> Option<(Option<ElementType>, &[i64])> {
        let p = self.params.as_ref()?.get(i)?;
        Some((p.ty, &p.dims))
    }

    /// The devices it runs on, in the order of `execute`'s argument lists.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Runs the program and waits for it. `args` holds one argument list per
    /// device of [`LoadedExecutable::devices`]; the result holds one output
    /// list per device. Donated arguments are deleted afterwards.
    pub fn execute<'b, A: AsRef<[&'b Buffer]>>(
        &self,
        args: &[A],
        options: &ExecuteOptions,
    ) -> Result<Vec<Vec<Buffer>>> {
        let (outputs, events) = self.launch(args, options)?;
        let p = &*self.client.plugin;
        let mut res = Ok(());
        for &e in &events {
            // SAFETY: the events are ours, live, and destroyed right after.
            let r = unsafe { await_raw(p, e) };
            // SAFETY: as above.
            unsafe { destroy_event(p, e) };
            if res.is_ok() {
                res = r;
            }
        }
        res.map(|()| outputs)
    }

    /// Starts the program and returns at once with the outputs and one
    /// completion event per device; see [`Execution::wait`].
    pub fn execute_async<'b, A: AsRef<[&'b Buffer]>>(
        &self,
        args: &[A],
        options: &ExecuteOptions,
    ) -> Result<Execution> {
        let (outputs, events) = self.launch(args, options)?;
        let plugin = &self.client.plugin;
        let done = events
            .into_iter()
            .map(|e| {
                Event::from_raw(plugin, e)
                    .ok_or_else(|| no_result("PJRT_LoadedExecutable_Execute", "event"))
            })
            .collect::<Result<_>>()?;
        Ok(Execution { outputs, done })
    }

    fn launch<'b, A: AsRef<[&'b Buffer]>>(
        &self,
        args: &[A],
        options: &ExecuteOptions,
    ) -> Result<(Vec<Vec<Buffer>>, Vec<*mut ffi::PJRT_Event>)> {
        let n_devices = self.devices.len();
        if args.len() != n_devices {
            return Err(Error::InvalidArgument(format!(
                "{} argument lists for an executable on {n_devices} devices",
                args.len()
            )));
        }
        let n_args = args.first().map_or(0, |a| a.as_ref().len());
        if let Some(params) = &self.params
            && params.len() != n_args
        {
            return Err(Error::InvalidArgument(format!(
                "{n_args} arguments for a program of {} parameters",
                params.len()
            )));
        }
        // The argument pointers, flat `[device][arg]`, then one pointer per device.
        let mut flat_args: Vec<*mut ffi::PJRT_Buffer> = Vec::with_capacity(n_devices * n_args);
        for (d, list) in args.iter().enumerate() {
            let list = list.as_ref();
            if list.len() != n_args {
                return Err(Error::InvalidArgument(format!(
                    "device {d} has {} arguments, device 0 has {n_args}",
                    list.len()
                )));
            }
            for (i, b) in list.iter().enumerate() {
                if !Arc::ptr_eq(b.client_inner(), &self.client) {
                    return Err(Error::InvalidArgument(format!(
                        "argument {i} of device {d} belongs to another client"
                    )));
                }
                if let Some(params) = &self.params {
                    check_param(b, &params[i], i, d)?;
                }
                flat_args.push(b.raw());
            }
        }
        let arg_lists: Vec<*const *mut ffi::PJRT_Buffer> = (0..n_devices)
            .map(|d| flat_args[d * n_args..].as_ptr())
            .collect();
        let n_out = self.num_outputs;
        let mut flat_out: Vec<*mut ffi::PJRT_Buffer> =
            vec![std::ptr::null_mut(); n_devices * n_out];
        let base = flat_out.as_mut_ptr();
        // SAFETY: each offset is within `flat_out` (at most its length).
        let out_lists: Vec<*mut *mut ffi::PJRT_Buffer> = (0..n_devices)
            .map(|d| unsafe { base.add(d * n_out) })
            .collect();
        let mut events: Vec<*mut ffi::PJRT_Event> = vec![std::ptr::null_mut(); n_devices];

        let mut opts = ffi::PJRT_ExecuteOptions::new();
        opts.non_donatable_input_indices = options.non_donatable_input_indices.as_ptr();
        opts.num_non_donatable_input_indices = options.non_donatable_input_indices.len();
        let mut exec = ffi::PJRT_LoadedExecutable_Execute_Args::new();
        exec.executable = self.raw.as_ptr();
        exec.options = &mut opts;
        exec.argument_lists = arg_lists.as_ptr();
        exec.num_devices = n_devices;
        exec.num_args = n_args;
        exec.output_lists = out_lists.as_ptr();
        exec.device_complete_events = events.as_mut_ptr();
        // SAFETY: every list has the sizes given; the argument buffers are
        // live (borrowed), the output lists have room for `num_outputs`
        // buffers per device, and all of it outlives the call.
        unsafe {
            call!(
                &self.client.plugin,
                PJRT_LoadedExecutable_Execute,
                &mut exec
            )
        }?;

        let mut outputs = Vec::with_capacity(n_devices);
        let mut missing = false;
        for d in 0..n_devices {
            let mut list = Vec::with_capacity(n_out);
            for &raw in &flat_out[d * n_out..(d + 1) * n_out] {
                // SAFETY: outputs are new buffers owned by us.
                match unsafe { Buffer::from_raw(&self.client, raw) } {
                    Some(b) => list.push(b),
                    None => missing = true,
                }
            }
            outputs.push(list);
        }
        if missing || events.iter().any(|e| e.is_null()) {
            for &e in events.iter().filter(|e| !e.is_null()) {
                // SAFETY: our events, destroyed once.
                unsafe { destroy_event(&self.client.plugin, e) };
            }
            return Err(no_result(
                "PJRT_LoadedExecutable_Execute",
                "output buffer or event",
            ));
        }
        Ok((outputs, events))
    }

    /// The executable in the plugin's serialized form, loadable with
    /// [`Client::deserialize_and_load`] by the same plugin build.
    ///
    /// Serialize executables you compiled: on the XLA CPU plugins (0.81 to
    /// 0.115), the bytes of a *deserialized* executable load but can lack
    /// compiled kernels, and executing them fails (cleanly).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        let p = &*self.client.plugin;
        let mut args = ffi::PJRT_Executable_Serialize_Args::new();
        args.executable = self.exe.as_ptr();
        // SAFETY: valid args on a live executable.
        unsafe { call!(p, PJRT_Executable_Serialize, &mut args) }?;
        // SAFETY: the bytes live until the deleter runs, right after the copy.
        let bytes = unsafe {
            raw_slice(
                args.serialized_bytes.cast::<u8>(),
                args.serialized_bytes_size,
            )
        }
        .to_vec();
        if let Some(deleter) = args.serialized_executable_deleter
            && !args.serialized_executable.is_null()
        {
            // SAFETY: the plugin's deleter for its own object, called once.
            unsafe { deleter(args.serialized_executable) };
        }
        Ok(bytes)
    }
}

impl Drop for LoadedExecutable {
    fn drop(&mut self) {
        let p = &*self.client.plugin;
        let mut args = ffi::PJRT_Executable_Destroy_Args::new();
        args.executable = self.exe.as_ptr();
        // SAFETY: we own both handles and destroy each once.
        if let Err(e) = unsafe { call!(p, PJRT_Executable_Destroy, &mut args) } {
            tracing::warn!("{e}");
        }
        // SAFETY: as above.
        unsafe { destroy_loaded(p, self.raw.as_ptr()) };
    }
}

/// Checks argument `i` of device `d` against the compiled parameter shape.
#[inline]
fn check_param(b: &Buffer, param: &ParamShape, i: usize, d: usize) -> Result<()> {
    let (ty, dims) = b.raw_shape()?;
    let ty_ok = param.ty.is_none_or(|t| t.to_pjrt() == ty);
    if ty_ok && dims == param.dims.as_slice() {
        return Ok(());
    }
    let got = ElementType::from_pjrt(ty)
        .map_or_else(|| format!("type {ty}"), |t| t.mlir_name().to_string());
    let want = param.ty.map_or("?", |t| t.mlir_name());
    Err(Error::InvalidArgument(format!(
        "argument {i} of device {d} is {got}{dims:?}, the program takes {want}{:?}",
        param.dims
    )))
}

/// # Safety
/// `raw` is a live loaded executable of `p`, destroyed nowhere else.
unsafe fn destroy_loaded(p: &Plugin, raw: *mut ffi::PJRT_LoadedExecutable) {
    let mut args = ffi::PJRT_LoadedExecutable_Destroy_Args::new();
    args.executable = raw;
    // SAFETY: forwarded from the caller.
    if let Err(e) = unsafe { call!(p, PJRT_LoadedExecutable_Destroy, &mut args) } {
        tracing::warn!("{e}");
    }
}
