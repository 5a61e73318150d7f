//! The bounded queue between the HTTP side and a model's thread. A job
//! whose client has hung up gives its place back: a full queue first drops
//! such jobs before it refuses a new one, and the thread never takes one.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A queued job that can tell whether its client is still waiting.
pub trait Waiting {
    /// Whether the client has hung up (its answer channel is closed).
    fn abandoned(&self) -> bool;
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The queue is full.
    Busy,
    /// The thread has stopped.
    Stopped,
}

/// Up to `capacity` jobs waiting, in order.
pub struct Queue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    capacity: usize,
}

struct State<T> {
    jobs: VecDeque<T>,
    closed: bool,
    /// Jobs dropped because their client left, not yet counted by
    /// [`Queue::take_abandoned`].
    abandoned: u64,
}

impl<T: Waiting> Queue<T> {
    /// An empty queue of `capacity` places.
    pub fn new(capacity: usize) -> Queue<T> {
        Queue {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                closed: false,
                abandoned: 0,
            }),
            ready: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job`, or says why not: how many jobs wait now.
    pub fn push(&self, job: T) -> Result<usize, Refused> {
        let mut s = self.lock();
        if s.closed {
            return Err(Refused::Stopped);
        }
        if s.jobs.len() >= self.capacity {
            let before = s.jobs.len();
            s.jobs.retain(|j| !j.abandoned());
            s.abandoned += (before - s.jobs.len()) as u64;
        }
        if s.jobs.len() >= self.capacity {
            return Err(Refused::Busy);
        }
        s.jobs.push_back(job);
        self.ready.notify_one();
        Ok(s.jobs.len())
    }

    /// The next job whose client still waits, waiting up to `wait` for one
    /// (`None`: not at all); `None` when there is none or the queue is
    /// closed.
    pub fn pop(&self, wait: Option<Duration>) -> Option<T> {
        let mut s = self.lock();
        loop {
            while let Some(job) = s.jobs.pop_front() {
                if !job.abandoned() {
                    return Some(job);
                }
                s.abandoned += 1;
            }
            let wait = wait.filter(|_| !s.closed)?;
            let (next, timeout) = self
                .ready
                .wait_timeout(s, wait)
                .unwrap_or_else(|e| e.into_inner());
            s = next;
            if timeout.timed_out() && s.jobs.is_empty() {
                return None;
            }
        }
    }

    /// How many jobs wait (some of whose clients may have left).
    pub fn len(&self) -> usize {
        self.lock().jobs.len()
    }

    /// How many jobs were dropped because their client left since the
    /// last call.
    pub fn take_abandoned(&self) -> u64 {
        std::mem::take(&mut self.lock().abandoned)
    }

    /// Refuses every later job and hands back those waiting.
    pub fn close(&self) -> Vec<T> {
        let mut s = self.lock();
        s.closed = true;
        self.ready.notify_all();
        s.jobs.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    struct Job(Arc<AtomicBool>);

    impl Waiting for Job {
        fn abandoned(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
    }

    fn job() -> (Job, Arc<AtomicBool>) {
        let gone = Arc::new(AtomicBool::new(false));
        (Job(gone.clone()), gone)
    }

    #[test]
    fn a_full_queue_drops_abandoned_jobs_before_refusing() {
        let q = Queue::new(2);
        let (a, a_gone) = job();
        let (b, _) = job();
        assert_eq!(q.push(a), Ok(1));
        assert_eq!(q.push(b), Ok(2));
        assert_eq!(q.push(job().0), Err(Refused::Busy));
        a_gone.store(true, Ordering::Relaxed);
        assert_eq!(q.push(job().0), Ok(2));
        assert_eq!(q.take_abandoned(), 1);
        assert_eq!(q.take_abandoned(), 0);
    }

    #[test]
    fn pop_skips_abandoned_jobs_and_close_refuses() {
        let q = Queue::new(4);
        let (a, a_gone) = job();
        q.push(a).unwrap();
        a_gone.store(true, Ordering::Relaxed);
        assert!(q.pop(Some(Duration::from_millis(10))).is_none());
        assert_eq!(q.take_abandoned(), 1);
        q.push(job().0).unwrap();
        assert_eq!(q.close().len(), 1);
        assert_eq!(q.push(job().0), Err(Refused::Stopped));
        assert!(q.pop(Some(Duration::from_secs(60))).is_none());
    }
}
