//! The generation worker: one thread owns the model's [`Engine`], with
//! `--max-batch` slots, and takes requests from a bounded queue. Each turn
//! it admits waiting prompts into free slots, then advances every running
//! sequence in one batched step. A prompt whose
//! first tokens the [`PromptCache`] holds runs only the rest. A prompt with
//! at most [`IN_STEP`] tokens left to run (a short one, or the rest after a
//! prompt cache's hit) takes its slot at once and runs in that step beside
//! the decoding rows, so that prompts arriving together run together. Any
//! other runs on its own cache first, at most
//! `--prefill-chunk` of its tokens a turn while sequences decode, so that
//! it does not stall every stream for its whole length, and then takes a
//! slot. A prompt that has run picks its first token. A finished sequence,
//! or one whose client is gone, leaves its slot at once.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use radix::Platform;
use radix::nn::{CacheType, MatrixFormat};
use radix_models::engine::{Cache, Engine, MOST_STEP_TOKENS, SeqId, bucket};
use radix_models::pick::Picker;
use radix_models::prompt_cache::PromptCache;
use radix_models::sampling::logprobs;
use radix_text::Tokenizer;

use super::fault::{Fault, FaultKind};
pub use super::job::{Event, Events, Finish, Job, TokenLogprob};
use super::metrics::Metrics;
pub use super::queue::Refused;
use super::queue::{Queue, Waiting};
use super::stop::StopText;
use crate::generate::{Model, TextStream};

/// What the server needs of the worker.
pub struct Worker {
    queue: Arc<Queue<Job>>,
    abort: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    metrics: Arc<Metrics>,
    heartbeat: Arc<Heartbeat>,
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
    /// The form of the model's matrices.
    pub matrices: MatrixFormat,
    /// How the key/value caches store keys and values.
    pub cache_type: CacheType,
    /// The most bytes the prompt cache keeps (0: none).
    pub prompt_cache: usize,
    /// The most prompt tokens a turn runs while sequences decode.
    pub prefill_chunk: usize,
}

/// Whether the worker thread can take requests.
pub enum Health {
    /// It finished a turn of its loop within the deadline.
    Ok,
    /// It has not finished a turn for this long.
    Stuck(Duration),
    /// Its thread has ended.
    Gone,
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
        let faults = Fault::from_env()?;
        let queue = Arc::new(Queue::new(cfg.max_queue));
        let (ready_tx, ready) = mpsc::channel();
        let abort = Arc::new(AtomicBool::new(false));
        let heartbeat = Arc::new(Heartbeat::new());
        // The steps a prompt runs in: no longer than `MOST_STEP_TOKENS`.
        let longest = cfg.context.min(MOST_STEP_TOKENS);
        let prefill_buckets: Vec<usize> = std::iter::successors(Some(bucket(1)), |b| Some(b * 2))
            .take_while(|&b| b <= longest)
            .collect();
        let thread = {
            let (abort, metrics, buckets, queue, heartbeat) = (
                abort.clone(),
                metrics.clone(),
                prefill_buckets.clone(),
                queue.clone(),
                heartbeat.clone(),
            );
            std::thread::Builder::new()
                .name("radix-generate".into())
                .spawn(move || {
                    let loaded = load(&platform, &model, &cfg, &buckets);
                    let engine = match loaded {
                        Ok(loaded) => loaded,
                        Err(e) => return drop(ready_tx.send(Err(format!("{e:#}")))),
                    };
                    let _ = ready_tx.send(Ok(engine.slot_buckets().to_vec()));
                    let mut state = State {
                        prompts: engine.prompt_cache(cfg.prompt_cache),
                        prefilling: None,
                        chunk: cfg.prefill_chunk.max(1),
                        engine,
                        slots: cfg.max_batch,
                        context: cfg.context,
                        tokenizer: model.tokenizer,
                        stops: model.stops,
                        metrics,
                        abort,
                        heartbeat,
                        faults,
                    };
                    state.run(&queue);
                })
                .context("cannot start the generation thread")?
        };
        let decode_buckets = ready
            .recv()
            .context("the generation thread ended while loading")?
            .map_err(|e| anyhow!(e))?;
        // Loading took long; the thread's first turn is yet to come.
        heartbeat.beat();
        Ok(Worker {
            queue,
            abort,
            thread: Mutex::new(Some(thread)),
            metrics,
            heartbeat,
            prefill_buckets,
            decode_buckets,
        })
    }

    /// Queues `job`, or says why not.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        let res = self.queue.push(job);
        self.count_queue();
        res.map(drop)
    }

    /// Brings the queue's gauge and the count of abandoned jobs up to date.
    fn count_queue(&self) {
        count_queue(&self.queue, &self.metrics);
    }

    /// Whether the thread has finished a turn of its loop in the last
    /// `deadline` (an idle one turns every [`IDLE_TURN`]).
    pub fn health(&self, deadline: Duration) -> Health {
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if thread.as_ref().is_none_or(JoinHandle::is_finished) {
            return Health::Gone;
        }
        self.count_queue();
        match self.heartbeat.age() {
            age if age > deadline => Health::Stuck(age),
            _ => Health::Ok,
        }
    }

    /// Ends every sequence still running and waiting (their clients get an
    /// error) and waits for the thread, up to `limit` (a thread stuck in a
    /// step is left to end with the process).
    pub fn stop(&self, limit: Duration) {
        self.abort.store(true, Ordering::Relaxed);
        for job in self.queue.close() {
            let _ = job
                .events
                .send(Event::Failed("the server is shutting down".into()));
        }
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(thread) = thread else {
            return;
        };
        let t = Instant::now();
        while !thread.is_finished() && t.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(10));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            eprintln!("radix serve: the generation thread is stuck; exiting without it");
        }
    }
}

/// How long an idle worker waits for a job before it turns again (and so
/// how often it beats when idle).
pub const IDLE_TURN: Duration = Duration::from_millis(100);

/// The most prompt tokens left to run with which a prompt runs in the
/// batch's step, beside the decoding rows, rather than on its own cache
/// first. A step pads every row to its longest, so a row with more would
/// make every decoding row's token cost that many. Its logits are what
/// they are when the prompt runs alone: bit for bit where the products are
/// 8-bit dots (every block format, a dot per token for sequences of up to
/// [`radix::quant::DOT_MAX_TOKENS`] tokens however many rows a step has),
/// up to the order of summation for exact products. So a prompt cache's hit answers
/// as the prompt did cold, and a seeded sample draws the same tokens.
const IN_STEP: usize = 16;

/// Sets the queue gauge of `metrics` and counts the jobs dropped because
/// their clients left.
fn count_queue(queue: &Queue<Job>, metrics: &Metrics) {
    metrics
        .queue_depth
        .store(queue.len() as i64, Ordering::Relaxed);
    for _ in 0..queue.take_abandoned() {
        metrics.cancelled();
    }
}

impl Waiting for Job {
    fn abandoned(&self) -> bool {
        self.events.is_closed()
    }
}

/// When the worker last finished a turn of its loop.
struct Heartbeat {
    origin: Instant,
    /// Milliseconds from `origin` to the last beat.
    last: AtomicU64,
}

impl Heartbeat {
    fn new() -> Heartbeat {
        Heartbeat {
            origin: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn beat(&self) {
        let now = self.origin.elapsed().as_millis() as u64;
        self.last.store(now, Ordering::Relaxed);
    }

    fn age(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }
}

/// The model's engine, compiled for every prompt bucket (the smallest
/// kept loaded), with `slots` slots.
fn load(
    platform: &Platform,
    model: &Model,
    cfg: &WorkerConfig,
    buckets: &[usize],
) -> Result<Engine> {
    let (context, slots) = (cfg.context, cfg.max_batch);
    let mut engine = Engine::open(platform, &model.path, context, cfg.matrices)
        .and_then(|e| e.with_cache_type(cfg.cache_type))
        .with_context(|| format!("cannot load {}", model.path.display()))?;
    for &b in buckets {
        engine.compile(b)?;
    }
    // Every bucket is now in the executable cache; loaded, the longer ones
    // held ~30 MB that a server of short prompts never used. They load
    // again (tens of ms, once) when a prompt first needs them.
    for &b in buckets.iter().skip(1) {
        engine.release(b)?;
    }
    engine.open_slots(slots)?;
    super::heap::trim();
    // The start compiled or loaded every step: the plugin's compiler code
    // it touched (~65 MB on the CPU plugin) goes back to the page cache.
    match platform.client().plugin().page_out_code() {
        Ok(bytes) => tracing::debug!(bytes, "plugin code paged out after the start"),
        Err(e) => tracing::warn!("cannot page out the plugin's code: {e}"),
    }
    Ok(engine)
}

/// What the worker thread owns.
struct State {
    engine: Engine,
    /// Prompts run before, by their tokens.
    prompts: PromptCache,
    /// The prompt running, over as many turns as it takes.
    prefilling: Option<Prefill>,
    /// The most prompt tokens a turn runs while sequences decode.
    chunk: usize,
    slots: usize,
    context: usize,
    tokenizer: Tokenizer,
    stops: Vec<u32>,
    metrics: Arc<Metrics>,
    abort: Arc<AtomicBool>,
    heartbeat: Arc<Heartbeat>,
    faults: Vec<Fault>,
}

/// A prompt on its way into the batch: its cache holds the tokens run so
/// far.
struct Prefill {
    job: Job,
    cache: Cache,
    /// How many of the prompt's tokens came from the prompt cache.
    cached: usize,
}

impl Prefill {
    /// How many of the prompt's tokens are still to run.
    fn left(&self) -> usize {
        self.job.prompt.len() - self.cache.len()
    }
}

/// A running sequence in the engine's slots, and its reply so far.
struct Seq {
    id: SeqId,
    /// Prompt tokens not run yet: the next step runs them.
    unrun: Vec<u32>,
    /// The prompt, to keep in the prompt cache once it has run (if it may).
    keep: Option<Vec<u32>>,
    ids: Vec<u32>,
    text: TextStream,
    stop: StopText,
    picker: Picker,
    /// How many most likely tokens to list, if log-probabilities are asked.
    logprobs: Option<usize>,
    /// Log-probabilities not sent yet.
    pending: Vec<TokenLogprob>,
    max_tokens: usize,
    /// How many prompt tokens came from the prompt cache.
    cached: usize,
    events: Events,
    last_token: Instant,
}

impl Seq {
    /// Picks the token after `logits` (noting its log-probability if
    /// asked): `None` when a grammar allows none.
    fn pick(&mut self, logits: &[f32]) -> Option<u32> {
        let next = self.picker.pick(logits)?;
        if let Some(k) = self.logprobs {
            let (logprob, top) = logprobs(logits, next as usize, k);
            let top = top.into_iter().map(|(i, l)| (i as u32, l)).collect();
            self.pending.push(TokenLogprob {
                id: next,
                logprob,
                top,
            });
        }
        Some(next)
    }
}

/// How a turn of the loop ended, when the loop must end.
enum Exit {
    /// The server is stopping.
    Stopped,
    /// An injected `exit` fault.
    Fault,
}

impl State {
    /// Serves jobs until the server stops. The engine's slots hold the
    /// sequences of `active`: every turn ends with as many running as
    /// there are sequences (an error of the slots empties them, and the
    /// sequences they ran are failed); a panic fails the running sequences
    /// and opens the slots anew.
    fn run(&mut self, queue: &Queue<Job>) {
        let mut active: Vec<Seq> = vec![];
        let why = self.serve(queue, &mut active);
        fail(&mut active, why);
        self.fail_prefill(why);
        for job in queue.close() {
            let _ = job.events.send(Event::Failed(why.into()));
        }
        self.metrics.active_slots.store(0, Ordering::Relaxed);
        count_queue(queue, &self.metrics);
    }

    /// Turns until the loop must end: why it ended.
    fn serve(&mut self, queue: &Queue<Job>, active: &mut Vec<Seq>) -> &'static str {
        loop {
            self.heartbeat.beat();
            let turn = catch_unwind(AssertUnwindSafe(|| self.turn(active, queue)));
            match turn {
                Ok(Ok(())) => {}
                Ok(Err(Exit::Stopped)) => return "the server is shutting down",
                Ok(Err(Exit::Fault)) => return "the generation thread ended (injected fault)",
                Err(panic) => {
                    let msg = panic_message(&*panic);
                    tracing::error!("the generation thread panicked: {msg}");
                    let why = format!("the generation thread failed: {msg}");
                    fail(active, &why);
                    self.fail_prefill(&why);
                    if let Err(e) = self.rebuild() {
                        tracing::error!("cannot open the slots after a panic: {e:#}");
                        return "the generation thread failed and could not recover";
                    }
                }
            }
            count_queue(queue, &self.metrics);
            self.metrics
                .active_slots
                .store(active.len() as i64, Ordering::Relaxed);
        }
    }

    /// One turn: runs waiting prompts for free slots (blocking for a job
    /// when nothing runs), frees the slots of clients gone, then decodes one
    /// token of every running sequence.
    fn turn(&mut self, active: &mut Vec<Seq>, queue: &Queue<Job>) -> Result<(), Exit> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(Exit::Stopped);
        }
        self.admit(active, queue);
        // Clients gone leave before the step.
        let gone: Vec<bool> = active.iter().map(|s| s.events.is_closed()).collect();
        self.leave(active, &gone, true);
        if !active.is_empty() && self.inject(active)? {
            match self.step(active) {
                Ok(done) => self.leave(active, &done, false),
                // The step had every sequence's cache: the slots are empty.
                Err(e) => fail(active, &format!("{e:#}")),
            }
        }
        self.reconcile(active, "the slots lost their sequences");
        Ok(())
    }

    /// Fails every running sequence if the slots no longer hold exactly
    /// them (after an error they hold none), opening the slots anew if
    /// sequences are left that no request owns.
    fn reconcile(&mut self, active: &mut Vec<Seq>, why: &str) {
        let engine = &self.engine;
        if engine.running() == active.len() && active.iter().all(|s| engine.holds(s.id)) {
            return;
        }
        fail(active, why);
        if engine.running() > 0 {
            tracing::error!("{why}: opening the slots anew");
            if let Err(e) = self.rebuild() {
                // The engine holds no slots then: the next join fails.
                tracing::error!("cannot open the slots: {e:#}");
            }
        }
    }

    /// New, empty slots (their executables come from the cache).
    fn rebuild(&mut self) -> Result<()> {
        Ok(self.engine.open_slots(self.slots)?)
    }

    /// The kind of the fault of `RADIX_SERVE_FAULT` that a running
    /// sequence asks for, if one does: once it has its first token (a
    /// prompt running in the step gets it from the step, which a `hold`
    /// would otherwise withhold).
    fn fault(&self, active: &[Seq]) -> Option<FaultKind> {
        let asks = |f: &Fault| {
            active
                .iter()
                .any(|s| s.max_tokens == f.max_tokens && !s.ids.is_empty())
        };
        self.faults.iter().find(|f| asks(f)).map(|f| f.kind)
    }

    /// Injects the fault a running sequence asks for: whether the step
    /// runs.
    fn inject(&mut self, active: &[Seq]) -> Result<bool, Exit> {
        match self.fault(active) {
            Some(FaultKind::Panic) => panic!("injected panic"),
            Some(FaultKind::Exit) => Err(Exit::Fault),
            Some(FaultKind::Hang) => {
                while !self.abort.load(Ordering::Relaxed) {
                    std::thread::sleep(IDLE_TURN);
                }
                Err(Exit::Stopped)
            }
            Some(FaultKind::Hold) => {
                std::thread::sleep(IDLE_TURN);
                Ok(false)
            }
            Some(FaultKind::StepError) | None => Ok(true),
        }
    }

    /// Frees the slots of the sequences marked in `which` (`cancelled`: their
    /// clients left). A failed removal empties the slots; the next
    /// [`State::reconcile`] fails the rest.
    fn leave(&mut self, active: &mut Vec<Seq>, which: &[bool], cancelled: bool) {
        // Last first, so that `swap_remove` moves only sequences already
        // looked at.
        for row in (0..active.len()).rev() {
            if which[row] {
                if cancelled {
                    self.metrics.cancelled();
                }
                if let Err(e) = self.engine.leave(active[row].id) {
                    tracing::error!("cannot free the slot of sequence {row}: {e}");
                    active.swap_remove(row);
                    fail(active, &format!("a slot could not be freed: {e}"));
                    return;
                }
                active.swap_remove(row);
            }
        }
    }

    /// Runs waiting prompts while slots are free: all of them when no
    /// sequence decodes, else at most `chunk` tokens of them this turn (the
    /// rest of a prompt runs in the next turns). Waits up to [`IDLE_TURN`]
    /// for a job when nothing runs. A prompt that has run joins `active`.
    fn admit(&mut self, active: &mut Vec<Seq>, queue: &Queue<Job>) {
        let mut ran = 0;
        while active.len() < self.slots {
            let budget = match active.is_empty() {
                true => usize::MAX,
                false => self.chunk.saturating_sub(ran),
            };
            if budget == 0 {
                break;
            }
            if self.prefilling.is_none() {
                let nothing_runs = active.is_empty();
                let Some(job) = queue.pop(nothing_runs.then_some(IDLE_TURN)) else {
                    break;
                };
                let events = job.events.clone();
                match self.begin(job) {
                    // An empty rest (the routes refuse empty prompts) would
                    // give its row no token for the step.
                    Ok(p) if (1..=IN_STEP).contains(&p.left()) => {
                        match self.join_unrun(p) {
                            Ok(seq) => active.push(seq),
                            Err(e) => drop(events.send(Event::Failed(format!("{e:#}")))),
                        }
                        self.reconcile(active, "a sequence could not join the slots");
                    }
                    Ok(p) => match self.own(p) {
                        Ok(p) => self.prefilling = Some(p),
                        Err(e) => drop(events.send(Event::Failed(format!("{e:#}")))),
                    },
                    Err(e) => drop(events.send(Event::Failed(format!("{e:#}")))),
                }
                continue;
            }
            let p = self.prefilling.as_mut().expect("checked above");
            if p.job.events.is_closed() {
                self.prefilling = None;
                self.metrics.cancelled();
                continue;
            }
            let (prompt, done) = (&p.job.prompt, p.cache.len());
            let n = (prompt.len() - done).min(budget);
            let logits = self.engine.extend(&prompt[done..done + n], &mut p.cache);
            ran += n;
            let whole = p.cache.len() == prompt.len();
            let joined = match logits {
                Ok(logits) if whole => {
                    let p = self.prefilling.take().expect("checked above");
                    let events = p.job.events.clone();
                    self.join(p, &logits).map_err(|e| (events, e))
                }
                Ok(_) => continue,
                Err(e) => {
                    let p = self.prefilling.take().expect("checked above");
                    Err((p.job.events, e.into()))
                }
            };
            match joined {
                Ok(Some(seq)) => active.push(seq),
                Ok(None) => {}
                Err((events, e)) => drop(events.send(Event::Failed(format!("{e:#}")))),
            }
            self.reconcile(active, "a sequence could not join the slots");
            self.metrics
                .active_slots
                .store(active.len() as i64, Ordering::Relaxed);
        }
    }

    /// Starts running `job`'s prompt: from the longest beginning of it the
    /// prompt cache holds (the entry itself, which a join copies into a
    /// slot: see [`State::own`]), or from nothing.
    fn begin(&mut self, job: Job) -> Result<Prefill> {
        self.metrics.prompt(job.prompt.len());
        if job.prompt.len() >= self.context {
            bail!(
                "the prompt of {} tokens fills the context of {}",
                job.prompt.len(),
                self.context
            );
        }
        let hit = match job.cache_prompt {
            true => self.prompts.lookup_shared(&job.prompt)?,
            false => None,
        };
        let cache = match hit {
            Some(hit) => hit,
            None => self.engine.empty_cache()?,
        };
        let cached = cache.len();
        self.metrics.prompt_cached(cached);
        Ok(Prefill { job, cache, cached })
    }

    /// `p` with a cache of its own to run its prompt in, where
    /// [`State::begin`] gave it a prompt cache's entry.
    fn own(&mut self, p: Prefill) -> Result<Prefill> {
        let cache = self.prompts.own(p.cache)?;
        Ok(Prefill { cache, ..p })
    }

    /// Takes a slot for the prompt that has run (`logits` after its last
    /// token), keeps it in the prompt cache and picks the first token: the
    /// sequence, unless it ended there. On an error no slot is left to it
    /// (the error may have emptied the slots).
    fn join(&mut self, p: Prefill, logits: &[f32]) -> Result<Option<Seq>> {
        // A cache the prompt cache cannot copy costs that prompt's reuse,
        // not this sequence.
        if p.job.cache_prompt
            && let Err(e) = self.prompts.store(&p.job.prompt, &p.cache)
        {
            tracing::warn!("cannot keep the prompt in the prompt cache: {e}");
        }
        let mut seq = self.seat(p)?;
        match self.push(&mut seq, logits) {
            Ok(true) => Ok(Some(seq)),
            Ok(false) => {
                self.engine.leave(seq.id)?;
                Ok(None)
            }
            Err(e) => {
                self.engine.leave(seq.id)?;
                Err(e)
            }
        }
    }

    /// Takes a slot for a prompt with tokens left to run (see [`IN_STEP`]):
    /// the next step runs them, and keeps the prompt in the prompt cache.
    fn join_unrun(&mut self, p: Prefill) -> Result<Seq> {
        let unrun = p.job.prompt[p.cache.len()..].to_vec();
        let keep = p.job.cache_prompt.then(|| p.job.prompt.clone());
        let seq = self.seat(p)?;
        Ok(Seq { unrun, keep, ..seq })
    }

    /// `p`'s sequence in a free slot of the engine, with its cache.
    fn seat(&mut self, p: Prefill) -> Result<Seq> {
        let Prefill {
            mut job,
            cache,
            cached,
        } = p;
        let room = self.context - job.prompt.len();
        let id = self.engine.join(cache)?;
        Ok(Seq {
            id,
            unrun: vec![],
            keep: None,
            ids: vec![],
            text: TextStream::default(),
            stop: StopText::new(std::mem::take(&mut job.stop)),
            picker: job.picker,
            logprobs: job.logprobs,
            pending: vec![],
            // The routes checked it; the cache is the worker's to protect.
            max_tokens: job.max_tokens.min(room),
            cached,
            events: job.events,
            last_token: job.arrived,
        })
    }

    /// Fails the prompt running, if one is.
    fn fail_prefill(&mut self, why: &str) {
        if let Some(p) = self.prefilling.take() {
            let _ = p.job.events.send(Event::Failed(why.into()));
        }
    }

    /// Runs every running sequence's next tokens in one step: the prompt
    /// tokens it has left, or the token it picked last. Which of them ended
    /// (a sequence whose text cannot be made is failed and ends).
    fn step(&mut self, active: &mut [Seq]) -> Result<Vec<bool>> {
        let rows: Vec<Vec<u32>> = active
            .iter_mut()
            .map(|s| match s.unrun.is_empty() {
                true => s.ids.last().copied().into_iter().collect(),
                false => std::mem::take(&mut s.unrun),
            })
            .collect();
        let mut tokens: Vec<(SeqId, &[u32])> = (active.iter().zip(&rows))
            .map(|(s, r)| (s.id, r.as_slice()))
            .collect();
        if self.fault(active) == Some(FaultKind::StepError) {
            // One sequence too few: the engine refuses the step and empties
            // its slots.
            tokens.pop();
        }
        let logits = self.engine.step(&tokens)?;
        self.metrics.decode_step(rows.len());
        let mut done = Vec::with_capacity(active.len());
        for (seq, logits) in active.iter_mut().zip(&logits) {
            let goes_on = self.push(seq, logits).unwrap_or_else(|e| {
                let _ = seq.events.send(Event::Failed(format!("{e:#}")));
                false
            });
            done.push(!goes_on);
        }
        // A prompt that has just run is kept once every row's token is
        // sent: a copy takes tens of ms, which the rows after it would wait
        // for (sequences leave after the step, so it is still there).
        for seq in active.iter_mut() {
            if let Some(prompt) = seq.keep.take() {
                let (engine, id) = (&self.engine, seq.id);
                let kept = self
                    .prompts
                    .store_with(&prompt, || engine.sequence_cache(id));
                if let Err(e) = kept {
                    tracing::warn!("cannot keep the prompt in the prompt cache: {e}");
                }
            }
        }
        Ok(done)
    }

    /// Picks the token after `logits`, adds it to `seq` and sends its
    /// text: whether the sequence goes on. A grammar that allows no token
    /// ends the reply there.
    fn push(&mut self, seq: &mut Seq, logits: &[f32]) -> Result<bool> {
        let Some(next) = seq.pick(logits) else {
            let tail = seq.text.finish(&self.tokenizer, &seq.ids)?;
            let (mut text, found) = seq.stop.push(&tail);
            if !found {
                text += &seq.stop.flush();
            }
            if !text.is_empty() && seq.events.send(Event::Text(text, vec![])).is_err() {
                self.metrics.cancelled();
                return Ok(false);
            }
            let _ = seq.events.send(Event::Done {
                finish: Finish::Stop,
                completion_tokens: seq.ids.len(),
                cached_tokens: seq.cached,
            });
            return Ok(false);
        };
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
        let sent = if !text.is_empty() || !seq.pending.is_empty() {
            let logprobs = std::mem::take(&mut seq.pending);
            seq.events.send(Event::Text(text, logprobs))
        } else {
            Ok(())
        };
        if sent.is_err() {
            self.metrics.cancelled();
            return Ok(false);
        }
        if let Some(finish) = finish {
            let _ = seq.events.send(Event::Done {
                finish,
                completion_tokens: seq.ids.len(),
                cached_tokens: seq.cached,
            });
            return Ok(false);
        }
        Ok(true)
    }
}

/// Sends `why` to every sequence of `active` and forgets them.
fn fail(active: &mut Vec<Seq>, why: &str) {
    for seq in active.drain(..) {
        let _ = seq.events.send(Event::Failed(why.to_string()));
    }
}

/// The text of a panic's payload.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}
