//! Large uploads to the CPU plugin in transparent huge pages.
//!
//! A decode step reads every weight once per token, hundreds of megabytes
//! streamed from memory, and with 4 KiB pages each page of the stream costs
//! a TLB miss and restarts the hardware prefetcher. Measured on a 2-core Xeon
//! (2.6 GHz, AVX-512; Linux 6.18, THP `madvise`): one 262,144×640 Q8_0
//! matrix-vector product (Gemma 3's tied head, 178 MB) took 11.1 ms on two
//! threads in 4 KiB pages and 7.0 ms in 2 MiB pages.
//!
//! The plugin allocates a buffer's memory itself and, for
//! `PJRT_Client_BufferFromHostBuffer`, fills it at once, before radix could
//! advise the kernel; advising afterwards makes the kernel copy every page
//! again (`MADV_COLLAPSE`: 0.5 s for those 178 MB). So a large upload asks for an
//! uninitialized buffer, advises huge pages over its memory while no page of
//! it has been touched, and copies the bytes in itself: on the CPU plugin a
//! buffer's device address is host memory.

use crate::Result;
use crate::buffer::{Buffer, ElementType};
use crate::client::{Client, Device};

/// The smallest upload worth huge pages: below a few pages of 2 MiB, most of
/// the buffer lies in the partial pages at its ends, which stay small.
pub(crate) const MIN_BYTES: usize = 8 << 20;

/// The size of a transparent huge page on x86-64 and most aarch64 kernels.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// The bytes a large upload copies before it reports them copied.
const COPY_CHUNK: usize = 2 * HUGE_PAGE;

impl Client {
    /// `bytes` in a new buffer whose memory the kernel was advised to back
    /// with huge pages before it was written; `None` where that cannot be
    /// done (another platform, a plugin without uninitialized buffers, a
    /// buffer laid out otherwise than `bytes`), for the caller's plain
    /// upload.
    pub(crate) fn buffer_in_huge_pages(
        &self,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: &Device,
        copied: &dyn Fn(std::ops::Range<usize>),
    ) -> Result<Option<Buffer>> {
        self.buffer_in_huge_pages_filled(bytes.len(), 1, ty, dims, device, &|range, out| {
            out.copy_from_slice(&bytes[range.clone()]);
            copied(range);
        })
    }

    /// [`Client::buffer_in_huge_pages`] of `len` bytes that `fill` writes:
    /// given each range of the buffer in turn (a few megabytes, a whole
    /// number of `align` bytes but the last) and that range's memory.
    pub(crate) fn buffer_in_huge_pages_filled(
        &self,
        len: usize,
        align: usize,
        ty: ElementType,
        dims: &[i64],
        device: &Device,
        fill: &dyn Fn(std::ops::Range<usize>, &mut [u8]),
    ) -> Result<Option<Buffer>> {
        if !cfg!(target_os = "linux") {
            return Ok(None);
        }
        let Some((buffer, addr)) = self.dense_host_buffer(ty, dims, device)? else {
            return Ok(None);
        };
        advise(addr, len);
        // A few megabytes at a time, each filled while the caller's source
        // of it is still in the caches.
        let chunk = (COPY_CHUNK / align.max(1)).max(1) * align.max(1);
        for start in (0..len).step_by(chunk) {
            let end = (start + chunk).min(len);
            // SAFETY: on the CPU platform the device address is host memory
            // of `len` bytes (`dense_host_buffer` checked the buffer's
            // size against `dims`, which the callers checked against
            // `len`); the buffer is ours alone and no execution has seen
            // it yet.
            let out = unsafe {
                std::slice::from_raw_parts_mut((addr as *mut u8).add(start), end - start)
            };
            fill(start..end, out);
        }
        Ok(Some(buffer))
    }
}

/// Advises the kernel to back the whole huge pages inside `len` bytes at
/// `addr` with huge pages when they are first touched. A hint: a kernel
/// without transparent huge pages, or with them off, refuses it and the
/// memory stays in small pages.
pub(crate) fn advise(addr: usize, len: usize) {
    let start = addr.next_multiple_of(HUGE_PAGE);
    let end = (addr + len) / HUGE_PAGE * HUGE_PAGE;
    if end <= start {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: advice on memory this process owns changes no contents.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}
