//! A model's smaller weights packed together in transparent huge pages.
//!
//! `huge_pages.rs` gives an upload of 8 MiB or more huge pages of its own.
//! A quantized model's matrices are mostly smaller (SmolLM2-135M's Q8_0
//! projections: 0.2–1 MB each), and a huge page per matrix would make every
//! one of them a 2 MiB resident page. So weights below that size are copied
//! into shared chunks of huge-page memory that radix maps itself, and the
//! plugin is given views of them (`PJRT_Client_CreateViewOfDeviceBuffer`).
//! Measured on a 2-core Xeon (2.6 GHz, AVX-512; Linux 6.18, THP `madvise`):
//! SmolLM2 Q8_0 decoded 8 % faster with its matrices in such chunks.
//!
//! A chunk is unmapped when the last buffer viewing it is deleted: each view
//! holds a reference to its chunk, given back by the plugin's delete
//! callback. Space in a chunk is never reused, so only uploads that live as
//! long as a model come here ([`Client::weights_from_host`]).

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use crate::Result;
use crate::buffer::{Buffer, ElementType, no_result};
use crate::client::{Client, Device};
use crate::ffi;
use crate::huge_pages::{HUGE_PAGE, MIN_BYTES, advise};

/// The memory of one chunk; room for several of the largest weights that
/// come here (just under [`MIN_BYTES`]), so that a chunk's unused end, at
/// most one huge page resident, stays small beside it.
const CHUNK_BYTES: usize = 64 << 20;

/// Where each weight starts in its chunk: the alignment the CPU plugin's
/// own allocations have, which compiled kernels may assume.
const ALIGN: usize = 64;

/// One anonymous mapping, unmapped on drop.
struct Chunk {
    /// The mapping as `mmap` returned it.
    base: usize,
    len: usize,
    /// The huge-page-aligned region inside it that weights are placed in.
    start: usize,
}

impl Chunk {
    /// A fresh chunk advised into huge pages; `None` where the kernel
    /// refuses the mapping, and off Linux (whose huge pages this is for).
    #[cfg(not(target_os = "linux"))]
    fn map() -> Option<Chunk> {
        None
    }

    /// A fresh chunk advised into huge pages; `None` where the kernel
    /// refuses the mapping.
    #[cfg(target_os = "linux")]
    fn map() -> Option<Chunk> {
        let len = CHUNK_BYTES + HUGE_PAGE;
        // SAFETY: a new private anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let base = base as usize;
        let start = base.next_multiple_of(HUGE_PAGE);
        advise(start, CHUNK_BYTES);
        Some(Chunk { base, len, start })
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: our own mapping, and nothing views it any more: the arena
        // and every buffer placed in it held a reference.
        #[cfg(target_os = "linux")]
        unsafe {
            libc::munmap(self.base as *mut c_void, self.len)
        };
    }
}

/// The chunk being filled and how many of its bytes are taken.
struct Arena {
    chunk: Arc<Chunk>,
    used: usize,
}

static ARENA: Mutex<Option<Arena>> = Mutex::new(None);

/// Room for `len` bytes: its chunk and address; `None` where no chunk can
/// be mapped.
fn place(len: usize) -> Option<(Arc<Chunk>, usize)> {
    let mut arena = ARENA.lock().unwrap_or_else(|e| e.into_inner());
    let full = arena.as_ref().is_none_or(|a| a.used + len > CHUNK_BYTES);
    if full {
        // The old chunk lives on in the buffers that view it.
        *arena = Some(Arena {
            chunk: Arc::new(Chunk::map()?),
            used: 0,
        });
    }
    let arena = arena.as_mut().expect("set above");
    let addr = arena.chunk.start + arena.used;
    arena.used += len.next_multiple_of(ALIGN);
    Some((arena.chunk.clone(), addr))
}

/// The plugin's delete callback: gives back the view's reference to its
/// chunk.
unsafe extern "C" fn release(_device_buffer: *mut c_void, chunk: *mut c_void) {
    // SAFETY: `chunk` is the `Arc::into_raw` of `weights_in_arena`, given
    // back once, when the plugin is done with the view.
    drop(unsafe { Arc::from_raw(chunk as *const Chunk) });
}

impl Client {
    /// `bytes` in a view of a shared huge-page chunk; `None` where that
    /// cannot be done (another platform, a plugin without views, a weight
    /// of [`MIN_BYTES`] or more, no memory for a chunk), for the caller's
    /// plain upload.
    pub(crate) fn weights_in_arena(
        &self,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: &Device,
    ) -> Result<Option<Buffer>> {
        let inner = &*self.inner;
        let usable = cfg!(target_os = "linux")
            && self.platform_name() == "cpu"
            && inner
                .plugin
                .api()
                .PJRT_Client_CreateViewOfDeviceBuffer
                .is_some();
        if !usable || bytes.is_empty() || bytes.len() >= MIN_BYTES {
            return Ok(None);
        }
        let Some((chunk, addr)) = place(bytes.len()) else {
            return Ok(None);
        };
        // SAFETY: `place` gave `bytes.len()` bytes of the chunk's mapping
        // at `addr` to this weight alone.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
        let mut args = ffi::PJRT_Client_CreateViewOfDeviceBuffer_Args::new();
        args.client = inner.raw;
        args.device_buffer_ptr = addr as *mut c_void;
        args.dims = dims.as_ptr();
        args.num_dims = dims.len();
        args.element_type = ty.to_pjrt();
        args.device = inner.own_device(device)?;
        args.on_delete_callback = Some(release);
        args.on_delete_callback_arg = Arc::into_raw(chunk) as *mut c_void;
        // SAFETY: `dims` outlives the call; the memory at `addr` stays
        // mapped until `release` gives back the reference passed with it.
        let called = unsafe {
            call!(
                &inner.plugin,
                PJRT_Client_CreateViewOfDeviceBuffer,
                &mut args
            )
        };
        if let Err(e) = called {
            // No view, so no callback: the reference is ours to give back.
            // SAFETY: the `Arc::into_raw` above, not given to the plugin.
            unsafe { release(std::ptr::null_mut(), args.on_delete_callback_arg) };
            return Err(e);
        }
        // SAFETY: a fresh buffer owned by us.
        match unsafe { Buffer::from_raw(&self.inner, args.buffer) } {
            Some(buffer) => Ok(Some(buffer)),
            None => {
                // SAFETY: as above: without a view there is no callback.
                unsafe { release(std::ptr::null_mut(), args.on_delete_callback_arg) };
                Err(no_result("PJRT_Client_CreateViewOfDeviceBuffer", "buffer"))
            }
        }
    }
}
