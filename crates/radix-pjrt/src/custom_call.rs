//! Custom-call handlers written in Rust, registered with a plugin through the
//! PJRT FFI extension (extension type 5, `PJRT_FFI_Register_Handler`).
//!
//! XLA FFI handlers are plain C functions without user data, so every name
//! radix registers points at one C function, `dispatch`, and each call site
//! names its Rust handler in a string attribute [`NAME_ATTR`]. `dispatch`
//! answers XLA's metadata query (the FFI API version, made once per handler
//! before the first run), looks the handler up in a process-wide table,
//! runs it under `catch_unwind`, and turns an `Err` or a panic into an XLA
//! FFI error, so a failing handler makes the execution return an error and
//! never unwinds into C.
//!
//! A handler sees a [`CallFrame`]: its operand and result buffers (host
//! memory on the CPU), its attributes as [`AttrValue`]s, and on the CPU the
//! plugin's intra-op [`ThreadPool`], over which [`parallel_for`] splits work.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use crate::buffer::ElementType;
use crate::plugin::{Plugin, lossy};
use crate::xla_ffi as x;
use crate::{Error, Result, ffi};

pub use radix_io::attr::{AttrValue, NAME_ATTR};

/// A handler: reads the frame's operands and attributes, writes its
/// results, or says what went wrong.
pub type Handler = dyn Fn(&CallFrame<'_>) -> std::result::Result<(), String> + Send + Sync;

/// The plugin's FFI extension.
pub struct FfiExtension<'p> {
    plugin: &'p Plugin,
    raw: *const ffi::PJRT_FFI_Extension,
}

impl Plugin {
    /// The plugin's FFI extension (PJRT extension type 5); an
    /// [`Error::Unsupported`] naming the plugin when it has none.
    pub fn ffi_extension(&self) -> Result<FfiExtension<'_>> {
        let mut ext = self.api().extension_start;
        while !ext.is_null() {
            // SAFETY: the chain is a linked list of static extension
            // headers owned by the plugin, which is never unloaded.
            let (kind, size, next) = unsafe { ((*ext).type_, (*ext).struct_size, (*ext).next) };
            if kind == ffi::PJRT_Extension_Type_FFI {
                if size < std::mem::size_of::<ffi::PJRT_FFI_Extension>() {
                    return Err(Error::Unsupported(format!(
                        "the FFI extension of {} is too old to register handlers ({size} bytes)",
                        self.path().display()
                    )));
                }
                return Ok(FfiExtension {
                    plugin: self,
                    raw: ext.cast(),
                });
            }
            ext = next;
        }
        Err(Error::Unsupported(format!(
            "the plugin {} has no FFI extension (PJRT extension type 5)",
            self.path().display()
        )))
    }
}

impl FfiExtension<'_> {
    /// Registers the C function `handler` as the typed FFI handler of
    /// custom calls to `name` on `platform` (`Host` for the CPU, `CUDA`,
    /// `ROCM`).
    ///
    /// # Safety
    /// `handler` follows the XLA FFI calling convention for the rest of the
    /// process.
    pub unsafe fn register_raw(
        &self,
        name: &str,
        platform: &str,
        handler: x::XLA_FFI_Handler,
    ) -> Result<()> {
        let mut args = ffi::PJRT_FFI_Register_Handler_Args {
            struct_size: ffi::PJRT_FFI_Register_Handler_Args::STRUCT_SIZE,
            target_name: name.as_ptr().cast(),
            target_name_size: name.len(),
            handler: handler as *mut c_void,
            platform_name: platform.as_ptr().cast(),
            platform_name_size: platform.len(),
            traits: 0,
        };
        // SAFETY: `raw` points to the plugin's extension, checked to be
        // large enough to hold `register_handler`; `args` borrows `name`
        // and `platform` for the call, which copies them.
        unsafe {
            match (*self.raw).register_handler {
                Some(f) => self.plugin.check("PJRT_FFI_Register_Handler", f(&mut args)),
                None => Err(self.plugin.missing("PJRT_FFI_Register_Handler")),
            }
        }
    }
}

/// The Rust handlers by name, shared by every plugin.
static HANDLERS: RwLock<BTreeMap<String, Arc<Handler>>> = RwLock::new(BTreeMap::new());
/// The (plugin file, platform, name) triples registered so far.
static REGISTERED: Mutex<BTreeSet<(PathBuf, String, String)>> = Mutex::new(BTreeSet::new());

/// Registers `handler` for custom calls to `name` on `platform` of
/// `plugin`, once per process: a later call with the same handler does
/// nothing, one with another handler for the same name is an
/// [`Error::InvalidArgument`]. A plugin without the FFI extension is an
/// [`Error::Unsupported`].
pub fn register_handler(
    plugin: &Plugin,
    name: &str,
    platform: &str,
    handler: Arc<Handler>,
) -> Result<()> {
    {
        let mut table = HANDLERS.write().unwrap_or_else(|e| e.into_inner());
        match table.get(name) {
            Some(h) if !Arc::ptr_eq(h, &handler) => {
                return Err(Error::InvalidArgument(format!(
                    "another handler is already registered for custom call {name}"
                )));
            }
            Some(_) => {}
            None => {
                table.insert(name.to_string(), handler);
            }
        }
    }
    let key = (
        plugin.path().to_path_buf(),
        platform.to_string(),
        name.to_string(),
    );
    let mut done = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if done.contains(&key) {
        return Ok(());
    }
    let ext = plugin.ffi_extension()?;
    // SAFETY: `dispatch` is an XLA FFI handler for the life of the process.
    unsafe { ext.register_raw(name, platform, dispatch)? };
    done.insert(key);
    Ok(())
}

/// The one C function behind every Rust handler.
unsafe extern "C" fn dispatch(frame: *mut x::XLA_FFI_CallFrame) -> *mut x::XLA_FFI_Error {
    // SAFETY: XLA passes a valid call frame for the duration of the call.
    let frame = unsafe { &mut *frame };
    // SAFETY: as above; the extension chain belongs to the frame.
    if unsafe { answer_metadata(frame) } {
        return std::ptr::null_mut();
    }
    if frame.stage != x::XLA_FFI_ExecutionStage_EXECUTE {
        return std::ptr::null_mut();
    }
    let view = CallFrame { raw: frame };
    let res = catch_unwind(AssertUnwindSafe(|| {
        let name = view
            .string_attr(NAME_ATTR)
            .ok_or_else(|| format!("a radix custom call without the {NAME_ATTR} attribute"))?;
        let handler = HANDLERS
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no Rust handler is registered for custom call {name}"))?;
        handler(&view)
    }));
    let message = match res {
        Ok(Ok(())) => return std::ptr::null_mut(),
        Ok(Err(msg)) => msg,
        Err(payload) => format!("custom call panicked: {}", panic_message(&*payload)),
    };
    // SAFETY: `api` is the frame's live API table.
    unsafe { create_error(frame.api, &message) }
}

/// Fills in XLA's metadata query, if this call is one.
///
/// # Safety
/// `frame` is a live call frame.
unsafe fn answer_metadata(frame: &mut x::XLA_FFI_CallFrame) -> bool {
    let mut ext = frame.extension_start;
    while !ext.is_null() {
        // SAFETY: a linked list of extension headers owned by the caller.
        let base = unsafe { &*ext };
        if base.type_ == x::XLA_FFI_Extension_Metadata {
            let md = ext.cast::<x::XLA_FFI_Metadata_Extension>();
            // SAFETY: an extension of this type is a metadata extension
            // whose `metadata` points to a struct for us to fill.
            unsafe {
                let m = &mut *(*md).metadata;
                m.api_version.major_version = x::XLA_FFI_API_MAJOR;
                m.api_version.minor_version = x::XLA_FFI_API_MINOR;
                m.traits = 0;
            }
            return true;
        }
        ext = base.next;
    }
    false
}

/// An XLA FFI error carrying `message`.
///
/// # Safety
/// `api` is the live API table of a call frame.
unsafe fn create_error(api: *const x::XLA_FFI_Api, message: &str) -> *mut x::XLA_FFI_Error {
    let c = CString::new(message.replace('\0', " ")).expect("no NUL left");
    let mut args = x::XLA_FFI_Error_Create_Args {
        struct_size: std::mem::offset_of!(x::XLA_FFI_Error_Create_Args, errc)
            + std::mem::size_of::<x::XLA_FFI_Error_Code>(),
        extension_start: std::ptr::null_mut(),
        message: c.as_ptr(),
        errc: x::XLA_FFI_Error_Code_INTERNAL,
    };
    // SAFETY: `api` is live; `XLA_FFI_Error_Create` copies the message.
    match unsafe { (*api).XLA_FFI_Error_Create } {
        Some(f) => unsafe { f(&mut args) },
        None => std::ptr::null_mut(),
    }
}

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-string panic payload)".into()
    }
}

/// What a handler sees of one custom-call execution.
pub struct CallFrame<'a> {
    raw: &'a x::XLA_FFI_CallFrame,
}

/// An operand or result buffer of a [`CallFrame`].
#[derive(Debug, Clone, Copy)]
pub struct FfiBuffer<'a> {
    dtype: Option<ElementType>,
    dims: &'a [i64],
    data: *mut u8,
}

impl<'a> FfiBuffer<'a> {
    /// The element type (`None` for one radix does not model).
    pub fn dtype(&self) -> Option<ElementType> {
        self.dtype
    }

    /// The sizes of the axes.
    pub fn dims(&self) -> &'a [i64] {
        self.dims
    }

    /// The start of the data (device memory; host memory on the CPU).
    pub fn data(&self) -> *mut u8 {
        self.data
    }

    /// The size of the data in bytes (0 for an unknown dtype).
    pub fn byte_len(&self) -> usize {
        let n: i64 = self.dims.iter().product();
        self.dtype.map_or(0, |d| n.max(0) as usize * d.byte_size())
    }
}

impl<'a> CallFrame<'a> {
    /// The number of operands.
    pub fn n_args(&self) -> usize {
        self.raw.args.size.max(0) as usize
    }

    /// The number of results.
    pub fn n_rets(&self) -> usize {
        self.raw.rets.size.max(0) as usize
    }

    /// Operand `i`.
    pub fn arg(&self, i: usize) -> std::result::Result<FfiBuffer<'a>, String> {
        let a = &self.raw.args;
        if i >= self.n_args() {
            return Err(format!("operand {i} of {}", self.n_args()));
        }
        // SAFETY: `types` and `args` have `size` entries (XLA's frame).
        unsafe {
            if *a.types.add(i) != x::XLA_FFI_ArgType_BUFFER {
                return Err(format!("operand {i} is not a buffer"));
            }
            Ok(buffer(*a.args.add(i)))
        }
    }

    /// Result `i`.
    pub fn ret(&self, i: usize) -> std::result::Result<FfiBuffer<'a>, String> {
        let r = &self.raw.rets;
        if i >= self.n_rets() {
            return Err(format!("result {i} of {}", self.n_rets()));
        }
        // SAFETY: `types` and `rets` have `size` entries (XLA's frame).
        unsafe {
            if *r.types.add(i) != x::XLA_FFI_RetType_BUFFER {
                return Err(format!("result {i} is not a buffer"));
            }
            Ok(buffer(*r.rets.add(i)))
        }
    }

    /// The names of the attributes, in the frame's order (sorted by name).
    fn attr_entries(&self) -> impl Iterator<Item = (&'a str, x::XLA_FFI_AttrType, *mut c_void)> {
        let a = &self.raw.attrs;
        (0..a.size.max(0) as usize).map(move |i| {
            // SAFETY: `types`, `names` and `attrs` have `size` entries, and
            // names are byte spans valid for the call (UTF-8: MLIR names).
            unsafe {
                let span = &**a.names.add(i);
                let bytes = std::slice::from_raw_parts(span.ptr.cast::<u8>(), span.len);
                (
                    std::str::from_utf8(bytes).unwrap_or(""),
                    *a.types.add(i),
                    *a.attrs.add(i),
                )
            }
        })
    }

    /// The string attribute `name`, if there is one.
    pub fn string_attr(&self, name: &str) -> Option<&'a str> {
        self.attr_entries()
            .find(|(n, t, _)| *n == name && *t == x::XLA_FFI_AttrType_STRING)
            .map(|(_, _, p)| {
                // SAFETY: a string attribute is a byte span valid for the call.
                unsafe {
                    let span = &*p.cast::<x::XLA_FFI_ByteSpan>();
                    let bytes = std::slice::from_raw_parts(span.ptr.cast::<u8>(), span.len);
                    std::str::from_utf8(bytes).unwrap_or("")
                }
            })
    }

    /// Every attribute, decoded, in the frame's order (sorted by name); an
    /// `Err` names one of a type [`AttrValue`] lacks.
    pub fn attrs(&self) -> std::result::Result<Vec<(String, AttrValue)>, String> {
        self.attr_entries()
            .map(|(name, kind, p)| {
                // SAFETY: `p` points to the encoding its `kind` says.
                let v = unsafe { decode_attr(kind, p) }
                    .map_err(|e| format!("attribute {name}: {e}"))?;
                Ok((name.to_string(), v))
            })
            .collect()
    }

    /// The intra-op thread pool of the execution (XLA:CPU), if the plugin
    /// provides one.
    pub fn thread_pool(&self) -> Option<ThreadPool<'a>> {
        // SAFETY: `api` is the frame's live table; entries past its
        // `struct_size` are not read.
        let api = unsafe { &*self.raw.api };
        let end = std::mem::offset_of!(x::XLA_FFI_Api, XLA_FFI_ThreadPool_NumThreads)
            + std::mem::size_of::<usize>();
        if !x::api_has(api.struct_size, end) || self.raw.ctx.is_null() {
            return None;
        }
        let (schedule, num_threads) = (
            api.XLA_FFI_ThreadPool_Schedule?,
            api.XLA_FFI_ThreadPool_NumThreads?,
        );
        let mut n = 0i64;
        let mut args = x::XLA_FFI_ThreadPool_NumThreads_Args {
            struct_size: std::mem::size_of::<x::XLA_FFI_ThreadPool_NumThreads_Args>(),
            extension_start: std::ptr::null_mut(),
            ctx: self.raw.ctx,
            num_threads: &mut n,
        };
        // SAFETY: valid args for the frame's context.
        let err = unsafe { num_threads(&mut args) };
        if !err.is_null() {
            // SAFETY: an error returned by this API, destroyed once.
            unsafe { destroy_error(api, err) };
            return None;
        }
        Some(ThreadPool {
            api,
            ctx: self.raw.ctx,
            schedule,
            n_threads: n.max(0) as usize,
        })
    }
}

/// # Safety
/// `p` points to a live `XLA_FFI_Buffer`.
unsafe fn buffer<'a>(p: *mut c_void) -> FfiBuffer<'a> {
    // SAFETY: forwarded; `dims` has `rank` entries.
    unsafe {
        let b = &*p.cast::<x::XLA_FFI_Buffer>();
        let dims = if b.rank > 0 {
            std::slice::from_raw_parts(b.dims, b.rank as usize)
        } else {
            &[]
        };
        FfiBuffer {
            dtype: element_type(b.dtype),
            dims,
            data: b.data.cast(),
        }
    }
}

/// The element type of an `XLA_FFI_DataType`.
fn element_type(t: x::XLA_FFI_DataType) -> Option<ElementType> {
    Some(match t {
        x::XLA_FFI_DataType_PRED => ElementType::Bool,
        x::XLA_FFI_DataType_S8 => ElementType::S8,
        x::XLA_FFI_DataType_S16 => ElementType::S16,
        x::XLA_FFI_DataType_S32 => ElementType::S32,
        x::XLA_FFI_DataType_S64 => ElementType::S64,
        x::XLA_FFI_DataType_U8 => ElementType::U8,
        x::XLA_FFI_DataType_U16 => ElementType::U16,
        x::XLA_FFI_DataType_U32 => ElementType::U32,
        x::XLA_FFI_DataType_U64 => ElementType::U64,
        x::XLA_FFI_DataType_F16 => ElementType::F16,
        x::XLA_FFI_DataType_BF16 => ElementType::BF16,
        x::XLA_FFI_DataType_F32 => ElementType::F32,
        x::XLA_FFI_DataType_F64 => ElementType::F64,
        x::XLA_FFI_DataType_C64 => ElementType::C64,
        x::XLA_FFI_DataType_C128 => ElementType::C128,
        x::XLA_FFI_DataType_F8E5M2 => ElementType::F8E5M2,
        x::XLA_FFI_DataType_F8E4M3FN => ElementType::F8E4M3FN,
        _ => return None,
    })
}

/// Decodes one attribute.
///
/// # Safety
/// `p` points to the encoding of an attribute of type `kind`.
unsafe fn decode_attr(
    kind: x::XLA_FFI_AttrType,
    p: *mut c_void,
) -> std::result::Result<AttrValue, String> {
    // SAFETY: forwarded; scalars point to one value of their dtype, arrays
    // to `size` values, strings are byte spans.
    unsafe {
        match kind {
            x::XLA_FFI_AttrType_SCALAR => {
                let s = &*p.cast::<x::XLA_FFI_Scalar>();
                Ok(match s.dtype {
                    x::XLA_FFI_DataType_PRED => AttrValue::Bool(*s.value.cast::<u8>() != 0),
                    x::XLA_FFI_DataType_S32 => AttrValue::I32(*s.value.cast::<i32>()),
                    x::XLA_FFI_DataType_S64 => AttrValue::I64(*s.value.cast::<i64>()),
                    x::XLA_FFI_DataType_F32 => AttrValue::F32(*s.value.cast::<f32>()),
                    x::XLA_FFI_DataType_F64 => AttrValue::F64(*s.value.cast::<f64>()),
                    t => return Err(format!("unsupported scalar type {t}")),
                })
            }
            x::XLA_FFI_AttrType_ARRAY => {
                let a = &*p.cast::<x::XLA_FFI_Array>();
                fn read<T: Copy>(a: &x::XLA_FFI_Array) -> Vec<T> {
                    if a.size == 0 {
                        return vec![];
                    }
                    // SAFETY: the caller's promise: `size` values of `T`.
                    unsafe { std::slice::from_raw_parts(a.data.cast::<T>(), a.size).to_vec() }
                }
                Ok(match a.dtype {
                    x::XLA_FFI_DataType_S32 => AttrValue::I32s(read(a)),
                    x::XLA_FFI_DataType_S64 => AttrValue::I64s(read(a)),
                    x::XLA_FFI_DataType_F32 => AttrValue::F32s(read(a)),
                    x::XLA_FFI_DataType_F64 => AttrValue::F64s(read(a)),
                    t => return Err(format!("unsupported array type {t}")),
                })
            }
            x::XLA_FFI_AttrType_STRING => {
                let s = &*p.cast::<x::XLA_FFI_ByteSpan>();
                Ok(AttrValue::Str(lossy(s.ptr, s.len)))
            }
            x::XLA_FFI_AttrType_DICTIONARY => Err("dictionaries are not supported".into()),
            t => Err(format!("unknown attribute type {t}")),
        }
    }
}

/// # Safety
/// `err` was returned by `api` and is destroyed once.
unsafe fn destroy_error(api: &x::XLA_FFI_Api, err: *mut x::XLA_FFI_Error) {
    if let Some(destroy) = api.XLA_FFI_Error_Destroy {
        let mut args = x::XLA_FFI_Error_Destroy_Args {
            struct_size: std::mem::size_of::<x::XLA_FFI_Error_Destroy_Args>(),
            extension_start: std::ptr::null_mut(),
            error: err,
        };
        // SAFETY: forwarded.
        unsafe { destroy(&mut args) };
    }
}

/// The intra-op thread pool of an XLA:CPU execution.
#[derive(Clone, Copy)]
pub struct ThreadPool<'a> {
    api: &'a x::XLA_FFI_Api,
    ctx: *mut x::XLA_FFI_ExecutionContext,
    schedule:
        unsafe extern "C" fn(*mut x::XLA_FFI_ThreadPool_Schedule_Args) -> *mut x::XLA_FFI_Error,
    n_threads: usize,
}

impl ThreadPool<'_> {
    /// The number of threads of the pool (`XLA_FFI_ThreadPool_NumThreads`).
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Schedules `task(data)` on the pool; `false` if the pool refused.
    ///
    /// # Safety
    /// `task(data)` is sound to run on another thread at any later time.
    unsafe fn schedule(&self, task: x::XLA_FFI_Task, data: *mut c_void) -> bool {
        let mut args = x::XLA_FFI_ThreadPool_Schedule_Args {
            struct_size: std::mem::size_of::<x::XLA_FFI_ThreadPool_Schedule_Args>(),
            extension_start: std::ptr::null_mut(),
            ctx: self.ctx,
            task: Some(task),
            data,
        };
        // SAFETY: valid args for the frame's context; the caller vouches
        // for the task.
        let err = unsafe { (self.schedule)(&mut args) };
        if err.is_null() {
            true
        } else {
            // SAFETY: an error of this API, destroyed once.
            unsafe { destroy_error(self.api, err) };
            false
        }
    }
}

/// What the workers of one [`parallel_for`] share. It outlives the call
/// (a scheduled task may start late), but `f` is only read by a worker that
/// claimed a task index below `n`, and the caller waits for all `n` tasks
/// to be done before it returns, so `f` is live whenever it is read.
struct Shared {
    next: AtomicUsize,
    n: usize,
    f: *const (dyn Fn(usize) + Sync),
    done: Mutex<(usize, Option<String>)>,
    all_done: Condvar,
}

// SAFETY: `f` is `Sync` and only called while live (see `Shared`); the rest
// is atomics and a mutex.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// Runs tasks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                return;
            }
            // SAFETY: `i < n` was claimed, so the caller still waits and
            // `f` is live (see `Shared`).
            let f = unsafe { &*self.f };
            let res = catch_unwind(AssertUnwindSafe(|| f(i)));
            let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
            done.0 += 1;
            if let Err(p) = res {
                done.1.get_or_insert_with(|| panic_message(&*p));
            }
            if done.0 == self.n {
                self.all_done.notify_all();
            }
        }
    }
}

unsafe extern "C" fn run_task(data: *mut c_void) {
    // SAFETY: `data` is a reference of an `Arc<Shared>` leaked for this task.
    let shared = unsafe { Arc::from_raw(data.cast::<Shared>().cast_const()) };
    shared.work();
}

/// Runs `f(i)` for every `i` in `0..n`, spread over up to `max_workers`
/// threads: the calling one and tasks scheduled on `pool` (never more than
/// the pool has threads). Without a pool, or with one worker, it runs on
/// the calling thread in order. A panic in `f` is caught; the others still
/// run, and the first panic's message comes back as the `Err`.
pub fn parallel_for(
    pool: Option<&ThreadPool<'_>>,
    n: usize,
    max_workers: usize,
    f: &(dyn Fn(usize) + Sync),
) -> std::result::Result<(), String> {
    let helpers = match pool {
        Some(p) => max_workers.min(p.n_threads() + 1).min(n).saturating_sub(1),
        None => 0,
    };
    // SAFETY: only the lifetime is erased; see `Shared` for why `f` is
    // never read after this function returns.
    let f_static: *const (dyn Fn(usize) + Sync) = unsafe {
        std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync)>(f)
    };
    let shared = Arc::new(Shared {
        next: AtomicUsize::new(0),
        n,
        f: f_static,
        done: Mutex::new((0, None)),
        all_done: Condvar::new(),
    });
    if let Some(pool) = pool {
        for _ in 0..helpers {
            let data = Arc::into_raw(shared.clone()).cast_mut().cast::<c_void>();
            // SAFETY: the task only touches `Shared` through its own `Arc`.
            if !unsafe { pool.schedule(run_task, data) } {
                // SAFETY: the task will not run: take its reference back.
                drop(unsafe { Arc::from_raw(data.cast::<Shared>().cast_const()) });
                break;
            }
        }
    }
    shared.work();
    let mut done = shared.done.lock().unwrap_or_else(|e| e.into_inner());
    while done.0 < n {
        done = shared
            .all_done
            .wait(done)
            .unwrap_or_else(|e| e.into_inner());
    }
    match done.1.take() {
        Some(msg) => Err(msg),
        None => Ok(()),
    }
}
