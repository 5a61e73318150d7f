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

    /// How many tasks per thread the kernels cut work into: more than one
    /// pays where tasks are claimed from a counter, so that a thread that
    /// starts late takes fewer.
    fn tasks_per_thread(&self) -> usize {
        1
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

/// Long-lived workers that wait for the next job by spinning for a short
/// while before they sleep, as ggml's pool does between the nodes of a
/// token's graph: a decode step hands a job to the pool every few tens of
/// microseconds, and waking a sleeping thread (a futex) costs about as long
/// as decoding a small matrix. Tasks are claimed one at a time from a shared
/// counter, so a worker that starts late takes fewer.
///
/// One job runs at a time; a caller that finds the pool busy (another
/// thread's job) runs its tasks itself rather than wait. The caller always
/// works on its own job too.
pub struct SpinPool {
    shared: std::sync::Arc<Shared>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

/// How long an idle worker spins before it sleeps: longer than the gaps
/// between the matrix products of one decode step, shorter than anything a
/// user would notice as a busy core.
const SPIN: std::time::Duration = std::time::Duration::from_micros(300);

/// What a job's tasks see: the function and the counters of its tasks.
struct Job<'a> {
    task: &'a (dyn Fn(usize) + Sync),
    n_tasks: usize,
    /// The next task to claim.
    next: AtomicUsize,
    /// Tasks finished (or panicked).
    done: AtomicUsize,
    panic: std::sync::Mutex<Option<String>>,
}

impl Job<'_> {
    /// Claims and runs tasks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n_tasks {
                return;
            }
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.task)(i)));
            if let Err(payload) = res {
                let msg = panic_message(payload.as_ref());
                let mut panic = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                panic.get_or_insert(msg);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a task panicked".into())
}

/// The state the caller and the workers share.
struct Shared {
    /// The running job (a `Job` on the caller's stack), or null.
    job: std::sync::atomic::AtomicPtr<Job<'static>>,
    /// Bumped for every job, so a worker joins each job once.
    epoch: AtomicUsize,
    /// Workers between reading `job` and leaving it: the caller waits for
    /// none before its job leaves its stack.
    busy: AtomicUsize,
    /// Whether a job is being run (one at a time).
    running: std::sync::atomic::AtomicBool,
    sleep: std::sync::Mutex<()>,
    wake: std::sync::Condvar,
    sleeping: AtomicUsize,
    stop: std::sync::atomic::AtomicBool,
}

impl SpinPool {
    /// A pool of `n_workers` threads besides the callers'.
    pub fn new(n_workers: usize) -> SpinPool {
        let shared = std::sync::Arc::new(Shared {
            job: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
            epoch: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            running: std::sync::atomic::AtomicBool::new(false),
            sleep: std::sync::Mutex::new(()),
            wake: std::sync::Condvar::new(),
            sleeping: AtomicUsize::new(0),
            stop: std::sync::atomic::AtomicBool::new(false),
        });
        let workers = (0..n_workers)
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("radix-kernel-{i}"))
                    .spawn(move || worker(&shared))
                    .expect("the OS starts a kernel thread")
            })
            .collect();
        SpinPool { shared, workers }
    }

    /// One pool for the process, with a worker per core besides the
    /// caller's, made on first use.
    pub fn global() -> &'static SpinPool {
        static POOL: OnceLock<SpinPool> = OnceLock::new();
        POOL.get_or_init(|| SpinPool::new(ScopedThreads::available().n_threads() - 1))
    }

    /// [`Parallel::run`], with a panic of a task returned as its message
    /// (every other task still runs).
    pub fn try_run(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync)) -> Result<(), String> {
        let job = Job {
            task,
            n_tasks,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panic: std::sync::Mutex::new(None),
        };
        let shared = &*self.shared;
        let alone = n_tasks <= 1
            || self.workers.is_empty()
            || shared
                .running
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err();
        if alone {
            job.work();
        } else {
            // The workers see the job only until it is taken back below,
            // and `busy` tells when the last has let go of it.
            let ptr = (&job as *const Job<'_>).cast_mut().cast::<Job<'static>>();
            shared.job.store(ptr, Ordering::SeqCst);
            shared.epoch.fetch_add(1, Ordering::SeqCst);
            if shared.sleeping.load(Ordering::SeqCst) > 0 {
                let _guard = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
                shared.wake.notify_all();
            }
            job.work();
            while job.done.load(Ordering::Acquire) < n_tasks {
                std::hint::spin_loop();
            }
            shared.job.store(std::ptr::null_mut(), Ordering::SeqCst);
            while shared.busy.load(Ordering::SeqCst) > 0 {
                std::hint::spin_loop();
            }
            shared.running.store(false, Ordering::Release);
        }
        match job.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(msg) => Err(msg),
            None => Ok(()),
        }
    }
}

impl SpinPool {
    /// [`SpinPool::try_run`] with a task per consecutive `chunk_len`-long
    /// chunk of `data` (the last may be shorter): `task(k, chunk)` for
    /// chunk `k`, each chunk used by its task alone.
    pub fn try_run_chunks<T: Send>(
        &self,
        data: &mut [T],
        chunk_len: usize,
        task: &(dyn Fn(usize, &mut [T]) + Sync),
    ) -> Result<(), String> {
        let parts: Vec<std::sync::Mutex<&mut [T]>> = data
            .chunks_mut(chunk_len.max(1))
            .map(std::sync::Mutex::new)
            .collect();
        self.try_run(parts.len(), &|k| {
            let mut part = parts[k].lock().unwrap_or_else(|e| e.into_inner());
            task(k, &mut part)
        })
    }
}

/// A worker: joins each new job, spins for [`SPIN`] after it, then sleeps
/// until the next.
fn worker(shared: &Shared) {
    let mut seen = shared.epoch.load(Ordering::SeqCst);
    loop {
        let mut idle_since = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            let epoch = shared.epoch.load(Ordering::SeqCst);
            if epoch != seen {
                seen = epoch;
                break;
            }
            spins += 1;
            if spins.is_multiple_of(64) && idle_since.elapsed() > SPIN {
                let guard = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
                shared.sleeping.fetch_add(1, Ordering::SeqCst);
                // Checked under the lock the caller takes to wake us, so a
                // job published in between is not missed.
                let guard = shared
                    .wake
                    .wait_while(guard, |_| {
                        shared.epoch.load(Ordering::SeqCst) == seen
                            && !shared.stop.load(Ordering::Relaxed)
                    })
                    .unwrap_or_else(|e| e.into_inner());
                shared.sleeping.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
                idle_since = std::time::Instant::now();
            } else {
                std::hint::spin_loop();
            }
        }
        shared.busy.fetch_add(1, Ordering::SeqCst);
        let ptr = shared.job.load(Ordering::SeqCst);
        if !ptr.is_null() {
            // SAFETY: the caller keeps its job alive and in `job` until it
            // has seen `busy` return to zero, and we counted ourselves in
            // `busy` before reading the pointer.
            unsafe { &*ptr }.work();
        }
        shared.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Parallel for SpinPool {
    fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Several tasks per thread: claimed from a counter, they even out a
    /// thread that starts late or is interrupted.
    fn tasks_per_thread(&self) -> usize {
        4
    }

    /// Handing a task to a spinning worker costs well under a microsecond.
    fn min_task_bytes(&self) -> usize {
        16 * 1024
    }

    fn run(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        if let Err(msg) = self.try_run(n_tasks, task) {
            panic!("{msg}");
        }
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for SpinPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinPool")
            .field("workers", &self.workers.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every task runs once, job after job, from several callers at once
    /// (a caller that finds the pool busy runs its own tasks).
    #[test]
    fn spin_pool_runs_every_task_once() {
        let pool = SpinPool::new(3);
        std::thread::scope(|s| {
            for caller in 0..3 {
                let pool = &pool;
                s.spawn(move || {
                    for job in 0..200 {
                        let n = 1 + (job * 7 + caller) % 37;
                        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                        pool.try_run(n, &|i| {
                            hits[i].fetch_add(1, Ordering::Relaxed);
                        })
                        .expect("no task panics");
                        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                    }
                });
            }
        });
    }

    /// Each chunk goes to one task, with its index; the last is shorter.
    #[test]
    fn spin_pool_runs_a_task_per_chunk() {
        let pool = SpinPool::new(2);
        let mut data = vec![0usize; 23];
        pool.try_run_chunks(&mut data, 5, &|k, chunk| {
            for v in chunk.iter_mut() {
                *v += k + 1;
            }
        })
        .expect("no task panics");
        let want: Vec<usize> = (0..23).map(|i| i / 5 + 1).collect();
        assert_eq!(data, want);
    }

    /// A worker that slept past its spin wakes for the next job.
    #[test]
    fn spin_pool_wakes_sleeping_workers() {
        let pool = SpinPool::new(1);
        for _ in 0..3 {
            std::thread::sleep(SPIN * 4);
            let done = AtomicUsize::new(0);
            pool.try_run(8, &|_| {
                done.fetch_add(1, Ordering::Relaxed);
            })
            .expect("no task panics");
            assert_eq!(done.load(Ordering::Relaxed), 8);
        }
    }

    /// A task's panic comes back as the job's error; the other tasks run,
    /// and the pool serves the next job.
    #[test]
    fn spin_pool_returns_a_panic_as_an_error() {
        let pool = SpinPool::new(2);
        let done = AtomicUsize::new(0);
        let res = pool.try_run(16, &|i| {
            if i == 5 {
                panic!("task {i} fails");
            }
            done.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(res, Err("task 5 fails".to_string()));
        assert_eq!(done.load(Ordering::Relaxed), 15);
        assert_eq!(pool.try_run(4, &|_| {}), Ok(()));
    }
}
