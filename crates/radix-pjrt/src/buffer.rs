//! Device buffers, their element types, and the events that say when
//! asynchronous work on them is done.

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::client::{Client, ClientInner, Device, raw_slice};
use crate::ffi;
use crate::plugin::Plugin;
use crate::{Error, Result};

/// The element type of a buffer (`PJRT_Buffer_Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// Boolean (`PRED`), one byte per element.
    Bool,
    /// Signed 8-bit integer.
    S8,
    /// Signed 16-bit integer.
    S16,
    /// Signed 32-bit integer.
    S32,
    /// Signed 64-bit integer.
    S64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// Complex of two `f32`.
    C64,
    /// Complex of two `f64`.
    C128,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits.
    F8E5M2,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits, finite only.
    F8E4M3FN,
}

impl ElementType {
    /// Every element type radix models.
    pub const ALL: [ElementType; 17] = [
        ElementType::Bool,
        ElementType::S8,
        ElementType::S16,
        ElementType::S32,
        ElementType::S64,
        ElementType::U8,
        ElementType::U16,
        ElementType::U32,
        ElementType::U64,
        ElementType::F16,
        ElementType::BF16,
        ElementType::F32,
        ElementType::F64,
        ElementType::C64,
        ElementType::C128,
        ElementType::F8E5M2,
        ElementType::F8E4M3FN,
    ];

    /// The size of one element in bytes.
    pub fn byte_size(self) -> usize {
        use ElementType::*;
        match self {
            Bool | S8 | U8 | F8E5M2 | F8E4M3FN => 1,
            S16 | U16 | F16 | BF16 => 2,
            S32 | U32 | F32 => 4,
            S64 | U64 | F64 | C64 => 8,
            C128 => 16,
        }
    }

    /// The StableHLO spelling of the type, e.g. `f32` or `i1`.
    pub fn mlir_name(self) -> &'static str {
        use ElementType::*;
        match self {
            Bool => "i1",
            S8 => "i8",
            S16 => "i16",
            S32 => "i32",
            S64 => "i64",
            U8 => "ui8",
            U16 => "ui16",
            U32 => "ui32",
            U64 => "ui64",
            F16 => "f16",
            BF16 => "bf16",
            F32 => "f32",
            F64 => "f64",
            C64 => "complex<f32>",
            C128 => "complex<f64>",
            F8E5M2 => "f8E5M2",
            F8E4M3FN => "f8E4M3FN",
        }
    }

    /// The `PJRT_Buffer_Type` value.
    pub fn to_pjrt(self) -> i32 {
        use ElementType::*;
        match self {
            Bool => 1,
            S8 => 2,
            S16 => 3,
            S32 => 4,
            S64 => 5,
            U8 => 6,
            U16 => 7,
            U32 => 8,
            U64 => 9,
            F16 => 10,
            F32 => 11,
            F64 => 12,
            BF16 => 13,
            C64 => 14,
            C128 => 15,
            F8E5M2 => 16,
            F8E4M3FN => 17,
        }
    }

    /// The element type of a `PJRT_Buffer_Type` value, if radix models it.
    pub fn from_pjrt(value: i32) -> Option<ElementType> {
        ElementType::ALL.into_iter().find(|t| t.to_pjrt() == value)
    }
}

/// An array on a device. Dropping it frees the device memory (once pending
/// work on it is done). Safe to share across threads, as PJRT buffers are.
pub struct Buffer {
    raw: NonNull<ffi::PJRT_Buffer>,
    client: Arc<ClientInner>,
}

// SAFETY: PJRT buffers are thread-safe.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Buffer");
        if let Ok(t) = self.element_type() {
            d.field("element_type", &t);
        }
        if let Ok(dims) = self.dims() {
            d.field("dims", &dims);
        }
        d.finish_non_exhaustive()
    }
}

impl Client {
    /// Copies `bytes` (row-major, dense) into a new buffer of type `ty` and
    /// shape `dims` on `device`. The copy is finished when this returns, so
    /// `bytes` may be freed at once.
    ///
    /// On the CPU plugin (Linux), a buffer of 8 MiB or more is placed in
    /// transparent huge pages where the kernel offers them (`huge_pages.rs`
    /// says why).
    pub fn buffer_from_host(
        &self,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: &Device,
    ) -> Result<Buffer> {
        check_host_bytes(bytes, ty, dims)?;
        self.upload_checked(bytes, ty, dims, device, &|_| {})
    }

    /// [`Client::buffer_from_host`] of `bytes` already checked against
    /// `ty` and `dims`; `copied` as [`Client::weights_from_host_releasing`]
    /// calls it: with each chunk a huge-page copy makes, or once with all
    /// of them after the plugin's copy.
    fn upload_checked(
        &self,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: &Device,
        copied: &dyn Fn(Range<usize>),
    ) -> Result<Buffer> {
        let huge = match bytes.len() >= crate::huge_pages::MIN_BYTES {
            true => self.buffer_in_huge_pages(bytes, ty, dims, device, copied)?,
            false => None,
        };
        let buffer = match huge {
            Some(buffer) => buffer,
            None => {
                let buffer = self.copied_by_plugin(bytes, ty, dims, device)?;
                copied(0..bytes.len());
                buffer
            }
        };
        Ok(self.counted(buffer, bytes.len()))
    }

    /// A buffer of `ty` and `dims` whose every byte is zero. On the CPU
    /// plugin it is zeroed through its address: no host copy, nothing
    /// counted as uploaded. Elsewhere zeros are uploaded.
    pub fn zeros(&self, ty: ElementType, dims: &[i64], device: &Device) -> Result<Buffer> {
        let len = byte_len(ty, dims)?;
        if let Some((buffer, addr)) = self.dense_host_buffer(ty, dims, device)? {
            // SAFETY: `dense_host_buffer` gave a fresh buffer of ours whose
            // `len` bytes of memory at `addr` are host memory.
            unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
            return Ok(buffer);
        }
        self.buffer_from_host(&vec![0u8; len], ty, dims, device)
    }

    /// On the CPU plugin, a new buffer of `ty` and `dims` (unwritten) and
    /// the address of its memory: host memory laid out densely, as
    /// `byte_len` bytes in row-major order. `None` on other platforms, for
    /// a plugin without uninitialized buffers, and for a buffer laid out
    /// otherwise (padded or tiled).
    pub(crate) fn dense_host_buffer(
        &self,
        ty: ElementType,
        dims: &[i64],
        device: &Device,
    ) -> Result<Option<(Buffer, usize)>> {
        let inner = &*self.inner;
        let api = inner.plugin.api();
        if self.platform_name() != "cpu" || api.PJRT_Client_CreateUninitializedBuffer.is_none() {
            return Ok(None);
        }
        let mut args = ffi::PJRT_Client_CreateUninitializedBuffer_Args::new();
        args.client = inner.raw;
        args.shape_dims = dims.as_ptr();
        args.shape_num_dims = dims.len();
        args.shape_element_type = ty.to_pjrt();
        args.device = inner.own_device(device)?;
        // SAFETY: `dims` outlives the call; a null layout asks for the default.
        unsafe {
            call!(
                &inner.plugin,
                PJRT_Client_CreateUninitializedBuffer,
                &mut args
            )
        }?;
        // SAFETY: a fresh buffer owned by us.
        let buffer = unsafe { Buffer::from_raw(&self.inner, args.buffer) }
            .ok_or_else(|| no_result("PJRT_Client_CreateUninitializedBuffer", "buffer"))?;
        buffer.ready_event()?.wait()?;
        if buffer.on_device_size()? != byte_len(ty, dims)? {
            return Ok(None);
        }
        let addr = buffer.device_address()?;
        Ok(Some((buffer, addr)))
    }

    /// [`Client::buffer_from_host`] for an upload that lives as long as a
    /// model, its weights: on the CPU plugin (Linux), one below 8 MiB is
    /// placed in a chunk of transparent huge pages shared with other
    /// weights (`weight_arena.rs` says why). A chunk's memory is freed once
    /// every buffer in it is, so bytes uploaded again and again belong in
    /// [`Client::buffer_from_host`].
    pub fn weights_from_host(
        &self,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: &Device,
    ) -> Result<Buffer> {
        self.weights_from_host_releasing(bytes, ty, dims, device, &|_| {})
    }

    /// [`Client::weights_from_host`], calling `copied` with ranges of
    /// `bytes` that are in the buffer and will not be read again, together
    /// all of them by the time it returns: a large weight is copied a few
    /// megabytes at a time, each given to `copied` after its copy, so a
    /// caller whose bytes are a file's memory map can let go of its pages
    /// during the copy rather than after it, and a model's weights are not
    /// resident twice at once.
    pub fn weights_from_host_releasing(
        &self,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: &Device,
        copied: &dyn Fn(Range<usize>),
    ) -> Result<Buffer> {
        check_host_bytes(bytes, ty, dims)?;
        match self.weights_in_arena(bytes, ty, dims, device)? {
            Some(buffer) => {
                copied(0..bytes.len());
                Ok(self.counted(buffer, bytes.len()))
            }
            None => self.upload_checked(bytes, ty, dims, device, copied),
        }
    }

    /// [`Client::weights_from_host`] of `len` bytes that `fill` writes on
    /// the way, for weights the caller rearranges as it uploads them (rows
    /// split at load) without holding them twice: `fill(range, out)`
    /// writes the buffer's bytes `range` into `out`. A large weight on the
    /// CPU plugin is filled in place a few megabytes at a time (each range
    /// a whole number of `align` bytes but the last), in order; otherwise
    /// once, into host memory that is then uploaded.
    pub fn weights_filled(
        &self,
        (len, align): (usize, usize),
        ty: ElementType,
        dims: &[i64],
        device: &Device,
        fill: &dyn Fn(Range<usize>, &mut [u8]),
    ) -> Result<Buffer> {
        let expected = byte_len(ty, dims)?;
        if len != expected {
            return Err(Error::InvalidArgument(format!(
                "{len} bytes to fill a {}x{dims:?} buffer of {expected} bytes",
                ty.mlir_name()
            )));
        }
        if len >= crate::huge_pages::MIN_BYTES
            && let Some(buffer) =
                self.buffer_in_huge_pages_filled(len, align, ty, dims, device, fill)?
        {
            return Ok(self.counted(buffer, len));
        }
        let mut bytes = vec![0u8; len];
        fill(0..len, &mut bytes);
        self.weights_from_host(&bytes, ty, dims, device)
    }

    /// `buffer`, with its `bytes` added to the bytes uploaded so far.
    fn counted(&self, buffer: Buffer, bytes: usize) -> Buffer {
        self.inner
            .host_to_device_bytes
            .fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        buffer
    }

    /// `bytes` in a new buffer the plugin allocates and fills
    /// (`PJRT_Client_BufferFromHostBuffer`).
    fn copied_by_plugin(
        &self,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: &Device,
    ) -> Result<Buffer> {
        let inner = &*self.inner;
        let mut args = ffi::PJRT_Client_BufferFromHostBuffer_Args::new();
        args.client = inner.raw;
        args.data = bytes.as_ptr().cast();
        args.type_ = ty.to_pjrt();
        args.dims = dims.as_ptr();
        args.num_dims = dims.len();
        args.host_buffer_semantics = ffi::PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
        args.device = inner.own_device(device)?;
        // SAFETY: `bytes` and `dims` outlive the call, and with
        // `kImmutableOnlyDuringCall` the plugin is done with `bytes` on return.
        unsafe { call!(&inner.plugin, PJRT_Client_BufferFromHostBuffer, &mut args) }?;
        // The host-buffer event carries no information with these semantics.
        if !args.done_with_host_buffer.is_null() {
            // SAFETY: an event we own.
            unsafe { destroy_event(&inner.plugin, args.done_with_host_buffer) };
        }
        // SAFETY: a fresh buffer owned by us.
        unsafe { Buffer::from_raw(&self.inner, args.buffer) }
            .ok_or_else(|| no_result("PJRT_Client_BufferFromHostBuffer", "buffer"))
    }
}

/// `Err` unless `bytes` is exactly a dense array of `ty` and `dims`.
fn check_host_bytes(bytes: &[u8], ty: ElementType, dims: &[i64]) -> Result<()> {
    let expected = byte_len(ty, dims)?;
    if bytes.len() != expected {
        return Err(Error::InvalidArgument(format!(
            "{} bytes given for a {}x{dims:?} buffer of {expected} bytes",
            bytes.len(),
            ty.mlir_name()
        )));
    }
    Ok(())
}

impl Buffer {
    /// Wraps an owned buffer handle; `None` when null.
    ///
    /// # Safety
    /// `raw` is null or a buffer of `client` that nobody else destroys.
    #[inline]
    pub(crate) unsafe fn from_raw(
        client: &Arc<ClientInner>,
        raw: *mut ffi::PJRT_Buffer,
    ) -> Option<Buffer> {
        NonNull::new(raw).map(|raw| Buffer {
            raw,
            client: client.clone(),
        })
    }

    #[inline]
    pub(crate) fn raw(&self) -> *mut ffi::PJRT_Buffer {
        self.raw.as_ptr()
    }

    #[inline]
    pub(crate) fn client_inner(&self) -> &Arc<ClientInner> {
        &self.client
    }

    pub(crate) fn plugin(&self) -> &Plugin {
        &self.client.plugin
    }

    /// The element type.
    pub fn element_type(&self) -> Result<ElementType> {
        let mut args = ffi::PJRT_Buffer_ElementType_Args::new();
        args.buffer = self.raw();
        // SAFETY: valid args on a live buffer.
        unsafe { call!(self.plugin(), PJRT_Buffer_ElementType, &mut args) }?;
        ElementType::from_pjrt(args.type_).ok_or_else(|| {
            Error::Unsupported(format!(
                "PJRT buffer type {} is not modelled by radix",
                args.type_
            ))
        })
    }

    /// The raw `PJRT_Buffer_Type` and the dimensions, for argument checks.
    #[inline]
    pub(crate) fn raw_shape(&self) -> Result<(i32, &[i64])> {
        let mut ty = ffi::PJRT_Buffer_ElementType_Args::new();
        ty.buffer = self.raw();
        // SAFETY: valid args on a live buffer.
        unsafe { call!(self.plugin(), PJRT_Buffer_ElementType, &mut ty) }?;
        Ok((ty.type_, self.dims()?))
    }

    /// The dimensions (shape) of the array.
    pub fn dims(&self) -> Result<&[i64]> {
        let mut args = ffi::PJRT_Buffer_Dimensions_Args::new();
        args.buffer = self.raw();
        // SAFETY: valid args on a live buffer.
        unsafe { call!(self.plugin(), PJRT_Buffer_Dimensions, &mut args) }?;
        // SAFETY: the array has the lifetime of the buffer, which `&self` borrows.
        Ok(unsafe { raw_slice(args.dims, args.num_dims) })
    }

    /// The number of bytes the array takes on the device.
    pub fn on_device_size(&self) -> Result<usize> {
        let mut args = ffi::PJRT_Buffer_OnDeviceSizeInBytes_Args::new();
        args.buffer = self.raw();
        // SAFETY: valid args on a live buffer.
        unsafe { call!(self.plugin(), PJRT_Buffer_OnDeviceSizeInBytes, &mut args) }?;
        Ok(args.on_device_size_in_bytes)
    }

    /// Whether the device memory is gone: deleted, or donated to an execution.
    pub fn is_deleted(&self) -> Result<bool> {
        let mut args = ffi::PJRT_Buffer_IsDeleted_Args::new();
        args.buffer = self.raw();
        // SAFETY: valid args on a live buffer handle.
        unsafe { call!(self.plugin(), PJRT_Buffer_IsDeleted, &mut args) }?;
        Ok(args.is_deleted)
    }

    /// The address of the buffer's memory on its device: only for telling
    /// whether two buffers share memory (an output aliasing a donated
    /// input does), never to read or write through. (The crate itself
    /// writes through it once, on the CPU plugin, to fill a fresh buffer in
    /// huge pages.)
    pub fn device_address(&self) -> Result<usize> {
        let mut args = ffi::PJRT_Buffer_UnsafePointer_Args::new();
        args.buffer = self.raw();
        // SAFETY: valid args on a live buffer handle.
        unsafe { call!(self.plugin(), PJRT_Buffer_UnsafePointer, &mut args) }?;
        Ok(args.buffer_pointer)
    }

    /// The device the buffer lives on.
    pub fn device(&self) -> Result<&Device> {
        let mut args = ffi::PJRT_Buffer_Device_Args::new();
        args.buffer = self.raw();
        // SAFETY: valid args on a live buffer.
        unsafe { call!(self.plugin(), PJRT_Buffer_Device, &mut args) }?;
        self.client
            .device_by_raw(args.device)
            .ok_or_else(|| no_result("PJRT_Buffer_Device", "device of this client"))
    }

    /// An event that is ready when the buffer's contents are computed.
    pub fn ready_event(&self) -> Result<Event> {
        let mut args = ffi::PJRT_Buffer_ReadyEvent_Args::new();
        args.buffer = self.raw();
        // SAFETY: valid args on a live buffer.
        unsafe { call!(self.plugin(), PJRT_Buffer_ReadyEvent, &mut args) }?;
        Event::from_raw(&self.client.plugin, args.event)
            .ok_or_else(|| no_result("PJRT_Buffer_ReadyEvent", "event"))
    }

    /// The number of bytes [`Buffer::to_host`] writes.
    pub fn host_size(&self) -> Result<usize> {
        let mut args = ffi::PJRT_Buffer_ToHostBuffer_Args::new();
        args.src = self.raw();
        // SAFETY: a null `dst` only asks for the size.
        unsafe { call!(self.plugin(), PJRT_Buffer_ToHostBuffer, &mut args) }?;
        Ok(args.dst_size)
    }

    /// Copies the array into `out` (row-major, dense), waiting for the copy.
    /// `out.len()` must be [`Buffer::host_size`].
    pub fn to_host(&self, out: &mut [u8]) -> Result<()> {
        let size = self.host_size()?;
        if out.len() != size {
            return Err(Error::InvalidArgument(format!(
                "host slice of {} bytes for a buffer of {size} bytes",
                out.len()
            )));
        }
        if self.copy_from_host_memory(out)? {
            return Ok(());
        }
        let mut args = ffi::PJRT_Buffer_ToHostBuffer_Args::new();
        args.src = self.raw();
        args.dst = out.as_mut_ptr().cast();
        args.dst_size = out.len();
        // SAFETY: `out` has the size the plugin asked for, and stays borrowed
        // until the event below is ready (the event is awaited even on error).
        unsafe { call!(self.plugin(), PJRT_Buffer_ToHostBuffer, &mut args) }?;
        match Event::from_raw(&self.client.plugin, args.event) {
            Some(event) => event.wait(),
            None => Ok(()),
        }
    }

    /// Copies the array into a new `Vec` (row-major, dense).
    pub fn to_host_vec(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.host_size()?];
        self.to_host(&mut out)?;
        Ok(out)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Buffer_Destroy_Args::new();
        args.buffer = self.raw();
        // SAFETY: we own the handle; it is destroyed once.
        if let Err(e) = unsafe { call!(self.plugin(), PJRT_Buffer_Destroy, &mut args) } {
            tracing::warn!("{e}");
        }
    }
}

/// The completion of asynchronous PJRT work (`PJRT_Event`), freed on drop.
/// It may move to another thread but not be shared.
pub struct Event {
    raw: NonNull<ffi::PJRT_Event>,
    plugin: Arc<Plugin>,
}

// SAFETY: an event handle may be awaited and destroyed from any one thread.
unsafe impl Send for Event {}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("ready", &self.is_ready().ok())
            .finish()
    }
}

impl Event {
    /// Wraps an owned event handle; `None` when null.
    pub(crate) fn from_raw(plugin: &Arc<Plugin>, raw: *mut ffi::PJRT_Event) -> Option<Event> {
        NonNull::new(raw).map(|raw| Event {
            raw,
            plugin: plugin.clone(),
        })
    }

    /// Whether the work is done (successfully or not).
    pub fn is_ready(&self) -> Result<bool> {
        let mut args = ffi::PJRT_Event_IsReady_Args::new();
        args.event = self.raw.as_ptr();
        // SAFETY: valid args on a live event.
        unsafe { call!(&self.plugin, PJRT_Event_IsReady, &mut args) }?;
        Ok(args.is_ready)
    }

    /// Blocks until the work is done and returns its error, if any.
    pub fn wait(&self) -> Result<()> {
        // SAFETY: a live event of `self.plugin`.
        unsafe { await_raw(&self.plugin, self.raw.as_ptr()) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: we own the handle; it is destroyed once.
        unsafe { destroy_event(&self.plugin, self.raw.as_ptr()) }
    }
}

/// Awaits a raw event.
///
/// # Safety
/// `event` is a live event of `plugin`.
#[inline]
pub(crate) unsafe fn await_raw(plugin: &Plugin, event: *mut ffi::PJRT_Event) -> Result<()> {
    let mut args = ffi::PJRT_Event_Await_Args::new();
    args.event = event;
    // SAFETY: forwarded from the caller.
    unsafe { call!(plugin, PJRT_Event_Await, &mut args) }
}

/// Destroys a raw event, logging a failure.
///
/// # Safety
/// `event` is a live event of `plugin`, destroyed nowhere else.
#[inline]
pub(crate) unsafe fn destroy_event(plugin: &Plugin, event: *mut ffi::PJRT_Event) {
    let mut args = ffi::PJRT_Event_Destroy_Args::new();
    args.event = event;
    // SAFETY: forwarded from the caller.
    if let Err(e) = unsafe { call!(plugin, PJRT_Event_Destroy, &mut args) } {
        tracing::warn!("{e}");
    }
}

/// The byte size of a dense array of `ty` with `dims`, checking the dims.
pub fn byte_len(ty: ElementType, dims: &[i64]) -> Result<usize> {
    let mut n: usize = ty.byte_size();
    for &d in dims {
        let d = usize::try_from(d)
            .map_err(|_| Error::InvalidArgument(format!("negative dimension in {dims:?}")))?;
        n = n.checked_mul(d).ok_or_else(|| {
            Error::InvalidArgument(format!("shape {dims:?} overflows the address space"))
        })?;
    }
    Ok(n)
}

#[cold]
pub(crate) fn no_result(call: &'static str, what: &str) -> Error {
    Error::Pjrt {
        call,
        code: "INTERNAL",
        message: format!("the plugin returned no {what}"),
    }
}
