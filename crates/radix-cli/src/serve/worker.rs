//! The generation worker: one thread owns the model, its runner and a
//! [`Batch`] of `--max-batch` cache rows (slots), and takes requests from a
//! bounded queue. Each turn it admits waiting requests into free slots
//! (their prefill and first token), then advances every running sequence by
//! one token in one batched decode step. A finished sequence, or one whose
//! client is gone, leaves its slot at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use radix::Platform;
use radix::nn::MatrixFormat;
use radix_models::generate::bucket;
use radix_models::runner::{Runner, RunnerBatch};
use radix_models::sampling::Sampler;
use radix_text::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use super::metrics::Metrics;
use super::stop::StopText;
use crate::generate::{Model, TextStream};

/// One request for the worker.
pub struct Job {
    /// The prompt's tokens.
    pub prompt: Vec<u32>,
    /// The most tokens to generate (the prompt and these fit the context).
    pub max_tokens: usize,
    /// How tokens are picked.
    pub sampler: Sampler,
    /// Text that ends the reply.
    pub stop: Vec<String>,
    /// Where the reply goes; closed when the client is gone.
    pub events: UnboundedSender<Event>,
    /// When the request arrived.
    pub arrived: Instant,
}

/// What the worker sends back for a job.
#[derive(Debug)]
pub enum Event {
    /// More text of the reply.
    Text(String),
    /// The end of the reply.
    Done {
        /// Why it ended.
        finish: Finish,
        /// How many tokens were generated.
        completion_tokens: usize,
    },
    /// The generation failed.
    Failed(String),
}

/// Why a reply ended, as OpenAI's `finish_reason` says it.
#[derive(Debug, Clone, Copy)]
pub enum Finish {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens`.
    Length,
}

impl Finish {
    /// `stop` or `length`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// Why a job was not queued.
pub enum Refused {
    /// The queue is full.
    Busy,
    /// The worker has stopped.
    Stopped,
}

/// What the server needs of the worker.
pub struct Worker {
    queue: SyncSender<Job>,
    abort: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    metrics: Arc<Metrics>,
    /// The prompt lengths compiled ahead.
    pub prefill_buckets: Vec<usize>,
    /// The decode batch sizes compiled ahead.
    pub decode_buckets: Vec<usize>,
}

/// The settings of the worker.
pub struct WorkerConfig {
    /// Positions per sequence.
    pub context: usize,
    /// Sequences at once.
    pub max_batch: usize,
    /// Requests waiting at most.
    pub max_queue: usize,
}

impl Worker {
    /// Loads `model` on `platform` in a new thread, compiles the prefill of
    /// every prompt bucket up to the context and the decode step, and
    /// returns once it is ready to take jobs.
    pub fn start(
        platform: Platform,
        model: Model,
        cfg: WorkerConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Worker> {
        let (queue, jobs) = mpsc::sync_channel(cfg.max_queue);
        let (ready_tx, ready) = mpsc::channel();
        let abort = Arc::new(AtomicBool::new(false));
        let prefill_buckets: Vec<usize> = std::iter::successors(Some(bucket(1)), |b| Some(b * 2))
            .take_while(|&b| b <= cfg.context)
            .collect();
        let thread = {
            let (abort, metrics, buckets) =
                (abort.clone(), metrics.clone(), prefill_buckets.clone());
            std::thread::Builder::new()
                .name("radix-generate".into())
                .spawn(move || {
                    let loaded = load(&platform, &model, cfg.context, &buckets, cfg.max_batch);
                    let (runner, batch) = match loaded {
                        Ok(loaded) => loaded,
                        Err(e) => return drop(ready_tx.send(Err(format!("{e:#}")))),
                    };
                    let _ = ready_tx.send(Ok(batch.buckets().to_vec()));
                    let mut state = State {
                        runner,
                        batch,
                        tokenizer: model.tokenizer,
                        stops: model.stops,
                        metrics,
                        abort,
                    };
                    state.run(&jobs);
                })
                .context("cannot start the generation thread")?
        };
        let decode_buckets = ready
            .recv()
            .context("the generation thread ended while loading")?
            .map_err(|e| anyhow!(e))?;
        Ok(Worker {
            queue,
            abort,
            thread: Mutex::new(Some(thread)),
            metrics,
            prefill_buckets,
            decode_buckets,
        })
    }

    /// Queues `job`, or says why not.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        // Counted before it is sent, so the worker's decrement never comes
        // first.
        self.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
        self.queue.try_send(job).map_err(|e| {
            self.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
            match e {
                TrySendError::Full(_) => Refused::Busy,
                TrySendError::Disconnected(_) => Refused::Stopped,
            }
        })
    }

    /// Ends every sequence still running and waiting (their clients get an
    /// error) and waits for the thread.
    pub fn stop(&self) {
        self.abort.store(true, Ordering::Relaxed);
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// The runner of whatever architecture the model is, compiled for every
/// prompt bucket, and a batch of `slots`.
fn load(
    platform: &Platform,
    model: &Model,
    context: usize,
    buckets: &[usize],
    slots: usize,
) -> Result<(Runner, RunnerBatch)> {
    let mut runner = Runner::open(platform, &model.path, context, MatrixFormat::AsStored)
        .with_context(|| format!("cannot load {}", model.path.display()))?;
    for &b in buckets {
        runner.compile(b)?;
    }
    let batch = runner.batch(slots)?;
    Ok((runner, batch))
}

/// What the worker thread owns.
struct State {
    runner: Runner,
    batch: RunnerBatch,
    tokenizer: Tokenizer,
    stops: Vec<u32>,
    metrics: Arc<Metrics>,
    abort: Arc<AtomicBool>,
}

/// A running sequence (its slot is its index among the running ones) and
/// its reply so far.
struct Seq {
    ids: Vec<u32>,
    text: TextStream,
    stop: StopText,
    sampler: Sampler,
    max_tokens: usize,
    events: UnboundedSender<Event>,
    last_token: Instant,
}

impl State {
    /// Serves jobs until the server stops.
    fn run(&mut self, jobs: &Receiver<Job>) {
        // Row `i` of the batch runs `active[i]`.
        let mut active: Vec<Seq> = vec![];
        loop {
            if self.abort.load(Ordering::Relaxed) {
                for seq in active {
                    let _ = seq
                        .events
                        .send(Event::Failed("the server is shutting down".into()));
                }
                while let Ok(job) = jobs.try_recv() {
                    let _ = job
                        .events
                        .send(Event::Failed("the server is shutting down".into()));
                }
                self.metrics.active_slots.store(0, Ordering::Relaxed);
                return;
            }
            while !self.batch.is_full() {
                let job = if active.is_empty() {
                    match jobs.recv_timeout(Duration::from_millis(100)) {
                        Ok(job) => job,
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                } else {
                    match jobs.try_recv() {
                        Ok(job) => job,
                        Err(_) => break,
                    }
                };
                self.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
                if job.events.is_closed() {
                    self.metrics.cancelled();
                    continue;
                }
                let events = job.events.clone();
                match self.start(job) {
                    Ok(Some(seq)) => active.push(seq),
                    Ok(None) => {}
                    Err(e) => {
                        let _ = events.send(Event::Failed(format!("{e:#}")));
                    }
                }
                self.metrics
                    .active_slots
                    .store(active.len() as i64, Ordering::Relaxed);
            }
            // Clients gone leave before the step.
            let gone: Vec<bool> = active.iter().map(|s| s.events.is_closed()).collect();
            self.leave(&mut active, &gone, true);
            if !active.is_empty() {
                match self.step(&mut active) {
                    Ok(done) => self.leave(&mut active, &done, false),
                    // The step had every sequence's cache: all of them end.
                    Err(e) => {
                        for seq in active.drain(..) {
                            let _ = seq.events.send(Event::Failed(format!("{e:#}")));
                        }
                    }
                }
            }
            self.metrics
                .active_slots
                .store(active.len() as i64, Ordering::Relaxed);
        }
    }

    /// Frees the slots of the sequences marked in `which` (`cancelled`: their
    /// clients left).
    fn leave(&mut self, active: &mut Vec<Seq>, which: &[bool], cancelled: bool) {
        // Last first: a removal moves the last row into the freed one.
        for row in (0..active.len()).rev() {
            if which[row] {
                if cancelled {
                    self.metrics.cancelled();
                }
                if let Err(e) = self.batch.remove(row) {
                    tracing::error!("cannot free slot {row}: {e}");
                }
                active.swap_remove(row);
            }
        }
    }

    /// Prefills `job`, takes a slot and picks its first token: the
    /// sequence, unless it ended there.
    fn start(&mut self, mut job: Job) -> Result<Option<Seq>> {
        self.metrics.prompt(job.prompt.len());
        let (logits, cache) = self.runner.prefill(&job.prompt)?;
        let row = self.batch.insert(cache)?;
        let next = job.sampler.pick(&logits) as u32;
        let mut seq = Seq {
            ids: vec![],
            text: TextStream::default(),
            stop: StopText::new(std::mem::take(&mut job.stop)),
            sampler: job.sampler,
            max_tokens: job.max_tokens,
            events: job.events,
            last_token: job.arrived,
        };
        if self.push(&mut seq, next)? {
            return Ok(Some(seq));
        }
        self.batch.remove(row)?;
        Ok(None)
    }

    /// Decodes one more token of every running sequence in one step: which
    /// of them ended.
    fn step(&mut self, active: &mut [Seq]) -> Result<Vec<bool>> {
        let last: Vec<u32> = active
            .iter()
            .filter_map(|s| s.ids.last().copied())
            .collect();
        let logits = self.batch.step(&mut self.runner, &last)?;
        self.metrics.decode_step(last.len());
        let mut done = Vec::with_capacity(active.len());
        for (seq, logits) in active.iter_mut().zip(&logits) {
            let next = seq.sampler.pick(logits) as u32;
            done.push(!self.push(seq, next)?);
        }
        Ok(done)
    }

    /// Adds token `next` to `seq` and sends its text: whether the sequence
    /// goes on.
    fn push(&mut self, seq: &mut Seq, next: u32) -> Result<bool> {
        self.metrics
            .token(seq.ids.is_empty(), seq.last_token.elapsed());
        seq.last_token = Instant::now();
        seq.ids.push(next);
        let piece = seq.text.push(&self.tokenizer, &seq.ids)?;
        // The last token's text comes out whole, an incomplete character
        // included, as `radix generate` prints it.
        let piece = if self.stops.contains(&next) || seq.ids.len() >= seq.max_tokens {
            piece + &seq.text.finish(&self.tokenizer, &seq.ids)?
        } else {
            piece
        };
        let (text, found) = seq.stop.push(&piece);
        let finish = if found || self.stops.contains(&next) {
            Some(Finish::Stop)
        } else if seq.ids.len() >= seq.max_tokens {
            Some(Finish::Length)
        } else {
            None
        };
        // Text held back as a possible stop string is part of the reply
        // unless a stop string was found.
        let text = match finish {
            Some(_) if !found => text + &seq.stop.flush(),
            _ => text,
        };
        if !text.is_empty() && seq.events.send(Event::Text(text)).is_err() {
            self.metrics.cancelled();
            return Ok(false);
        }
        if let Some(finish) = finish {
            let _ = seq.events.send(Event::Done {
                finish,
                completion_tokens: seq.ids.len(),
            });
            return Ok(false);
        }
        Ok(true)
    }
}
