//! The server's heap under glibc's malloc: fewer arenas, large blocks
//! mapped on their own, and the memory freed after the start given back.
//!
//! glibc gives each thread that allocates while another holds an arena an
//! arena of its own, up to eight per core, and an arena keeps the memory
//! freed in it for its next allocations. A server has many such threads
//! (the runtime's workers, the blocking pool that tokenizes requests, the
//! generation thread, the plugin's). And glibc raises its threshold for
//! mapping a large block on its own each time such a block is freed (up to
//! 32 MiB): after the start's compiles and loads, blocks of a few MiB land
//! in the arenas, whose freed space is then kept. Measured on a 2-core Xeon
//! under `bench/serve_load.py` (16 clients, SmolLM2 Q4_1, after 1,000
//! requests, the longer prompt buckets released): glibc's defaults 358–359
//! MiB; two arenas 353–356; two arenas and a fixed 1 MiB threshold
//! 343–351, at the same aggregate rate.

/// The most malloc arenas for the process.
const ARENAS: i32 = 2;

/// Blocks from this size up are mapped on their own, and unmapped when
/// freed: a decode step's logits (SmolLM2's 49,152 floats, 192 KiB) stay
/// below it, in the arenas, as they are allocated every token.
const MMAP_THRESHOLD: i32 = 1 << 20;

/// At most [`ARENAS`] malloc arenas and a fixed [`MMAP_THRESHOLD`], each
/// unless its glibc environment variable (`MALLOC_ARENA_MAX`,
/// `MALLOC_MMAP_THRESHOLD_`) says otherwise. Called before the server
/// starts its threads.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (var, param, value) in [
        ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, ARENAS),
        (
            "MALLOC_MMAP_THRESHOLD_",
            libc::M_MMAP_THRESHOLD,
            MMAP_THRESHOLD,
        ),
    ] {
        if std::env::var_os(var).is_none() {
            // SAFETY: sets a malloc tunable; no memory is touched.
            unsafe { libc::mallopt(param, value) };
        }
    }
}

/// Gives the free memory of every arena back to the kernel
/// (`malloc_trim`): after the start, whose compiles and loads free more
/// than the server will use again soon.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: releases only free pages of the heap.
    unsafe {
        libc::malloc_trim(0);
    }
}
