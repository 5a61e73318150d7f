//! How a rank's C heap keeps the memory of freed results.
//!
//! A collective inside a compiled program writes into a result buffer the
//! CPU plugin allocates with `malloc` on every call, and MPI's
//! cross-memory copies land straight in it. glibc serves a request above
//! its mmap threshold (128 KiB at first) with a fresh mapping, and raises
//! the threshold only when such a mapping is freed; in some processes a
//! 4 MiB all-reduce's result kept coming from fresh mappings, so every
//! call faulted in and zeroed 1,024 pages. Measured on a 2-core AMD EPYC
//! (Zen 4), 2 ranks, `radix-bench all-reduce --mib 4`, alternating: without
//! this, 7 of 25 processes ran at 0.94–1.95 ms a call and most others at
//! 0.48–0.58; with it, 32 of 32 at 0.48–0.64 (mpi4py's `Allreduce`:
//! 0.57–0.69 in the same rounds).

/// Fixes glibc's thresholds where its dynamic rule ends: requests up to
/// 32 MiB (glibc's largest dynamic mmap threshold on 64-bit) come from the
/// heap, and the heap returns its top to the system only past 64 MiB free
/// (twice that, as the dynamic rule sets it). Elsewhere than glibc, nothing.
pub(crate) fn keep_freed_results() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_THRESHOLD: libc::c_int = 32 << 20;
        const TRIM_THRESHOLD: libc::c_int = 64 << 20;
        // SAFETY: mallopt only sets the allocator's parameters; it is safe
        // to call at any time from any thread. A failure (0) leaves glibc's
        // own rule in place, which is correct, only slower.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        }
    }
}
