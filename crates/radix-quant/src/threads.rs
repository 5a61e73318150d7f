//! How the kernels spread rows over threads.
//!
//! The kernels cut their rows into tasks and hand them to a [`Parallel`]; the
//! caller decides where tasks run. radix's custom calls will pass XLA's
//! intra-op thread pool; [`ScopedThreads`] is the standalone default and
//! [`Serial`] runs everything on the calling thread. Every row is computed by
//! the same code whatever task it falls in, so results do not depend on the
//! split.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs independent tasks, perhaps at the same time.
pub trait Parallel: Sync {
    /// How many tasks may run at once; the kernels cut work into at most this
    /// many tasks.
    fn n_threads(&self) -> usize;

    /// Calls `task(i)` once for every `i` in `0..n_tasks` and returns when all
    /// calls have returned.
    fn run(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync));

    /// The least work, in weight bytes, worth a task of its own; smaller
    /// matrices get fewer tasks. Handing a task to a running pool costs about
    /// a microsecond, as long as decoding some 64 KiB of weights.
    fn min_task_bytes(&self) -> usize {
        64 * 1024
    }
}

/// Everything on the calling thread.
#[derive(Debug, Clone, Copy)]
pub struct Serial;

impl Parallel for Serial {
    fn n_threads(&self) -> usize {
        1
    }

    fn run(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..n_tasks).for_each(task);
    }
}

/// Threads spawned per call with `std::thread::scope`; the calling thread
/// works too. Spawning costs some microseconds per thread, which matters for
/// small matrices: a long-lived pool (XLA's) is the better [`Parallel`].
#[derive(Debug, Clone, Copy)]
pub struct ScopedThreads {
    n_threads: usize,
}

impl ScopedThreads {
    /// Up to `n_threads` threads (at least one: the caller's).
    pub fn new(n_threads: usize) -> ScopedThreads {
        ScopedThreads {
            n_threads: n_threads.max(1),
        }
    }

    /// As many threads as the machine offers this process, asked once (on
    /// Linux the answer reads cgroup files).
    pub fn available() -> ScopedThreads {
        static N_THREADS: OnceLock<usize> = OnceLock::new();
        let n =
            N_THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        ScopedThreads::new(*n)
    }
}

impl Parallel for ScopedThreads {
    fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Spawning a thread costs tens of microseconds (measured here: two
    /// threads made a 576×576 Q4_1 matvec 42 → 71 µs), as long as decoding
    /// about a megabyte.
    fn min_task_bytes(&self) -> usize {
        1 << 20
    }

    fn run(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        let n_threads = self.n_threads.min(n_tasks);
        if n_threads <= 1 {
            return (0..n_tasks).for_each(task);
        }
        // Tasks are taken from a shared counter, so a thread that starts late
        // (or is descheduled on a busy machine) takes fewer of them.
        let next = AtomicUsize::new(0);
        let work = || {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n_tasks {
                    break;
                }
                task(i);
            }
        };
        std::thread::scope(|s| {
            for _ in 1..n_threads {
                s.spawn(work);
            }
            work();
        });
    }
}
