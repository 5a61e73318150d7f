//! Downloads from the CPU plugin by reading its memory in place.
//!
//! `PJRT_Buffer_ToHostBuffer` on the CPU plugin hands the copy to one of
//! its worker threads and signals an event when done: for the 1.5 KB of one
//! sentence's embedding that took 40–170 µs on a 2-core Xeon whose cores
//! were busy (a thread to wake, then the caller to wake), 3 % of the whole
//! sentence. A CPU buffer's device address is host memory, so the copy can
//! be the caller's own `memcpy` once the buffer is computed.
//!
//! While radix reads, the buffer holds an external reference, the hold
//! NumPy and DLPack take when they share a buffer's memory: the plugin
//! refuses to donate a buffer so held to an execution, or to move it, so
//! the memory stays the buffer's until the reference is let go.

use crate::Result;
use crate::buffer::Buffer;
use crate::ffi;

impl Buffer {
    /// Copies the buffer into `out` from its memory on the CPU plugin;
    /// `false` (nothing written) where that cannot be done: another
    /// platform, a plugin without external references, a buffer whose
    /// memory is not `out.len()` dense bytes, or one the plugin will not
    /// hold (deleted or donated: the caller's download then reports it).
    pub(crate) fn copy_from_host_memory(&self, out: &mut [u8]) -> Result<bool> {
        let api = self.plugin().api();
        let held = api.PJRT_Buffer_IncreaseExternalReferenceCount.is_some()
            && api.PJRT_Buffer_DecreaseExternalReferenceCount.is_some();
        if !self.client_inner().is_cpu() || !held || self.on_device_size()? != out.len() {
            return Ok(false);
        }
        let mut args = ffi::PJRT_Buffer_IncreaseExternalReferenceCount_Args::new();
        args.buffer = self.raw();
        // SAFETY: valid args on a live buffer handle.
        if unsafe {
            call!(
                self.plugin(),
                PJRT_Buffer_IncreaseExternalReferenceCount,
                &mut args
            )
        }
        .is_err()
        {
            return Ok(false);
        }
        let copied = self.ready_event().and_then(|e| e.wait()).and_then(|()| {
            let addr = self.device_address()?;
            // SAFETY: on the CPU plugin the device address is host memory
            // of `out.len()` bytes (its on-device size, checked above: a
            // dense array in the default, row-major layout, the only one
            // the plugin gives a buffer radix made or an execution
            // returned); the buffer is computed (its ready event above) and
            // held, so nothing writes, moves or frees it meanwhile.
            unsafe {
                std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len())
            };
            Ok(())
        });
        let mut args = ffi::PJRT_Buffer_DecreaseExternalReferenceCount_Args::new();
        args.buffer = self.raw();
        // SAFETY: valid args on a live buffer handle, whose count we raised.
        let released = unsafe {
            call!(
                self.plugin(),
                PJRT_Buffer_DecreaseExternalReferenceCount,
                &mut args
            )
        };
        copied.and(released).map(|()| true)
    }
}
