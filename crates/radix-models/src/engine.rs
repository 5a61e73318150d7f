//! The engine: one model on a device and every way radix runs it, for the
//! library, `radix generate`, `radix serve`, `radix perplexity` and the
//! benchmarks alike.
//!
//! An [`Engine`] holds a [`Decoder`]'s weights on a device (uploaded once,
//! shared by every executable), the executables of its steps (a step over
//! `s` tokens of one sequence, prompts right-padded to 8, 16, 32, ... so a
//! new length does not recompile; a step of several sequences' rows), each
//! compiled on first use or loaded from the executable cache, and the
//! sequences it runs:
//! - a sequence the caller holds, as its [`Cache`]: [`Engine::prefill`],
//!   [`Engine::extend`], [`Engine::decode`] and [`Engine::generate`] (what
//!   `radix generate` runs), the prompt cache's entries;
//! - sequences the engine holds in its slots, by [`SeqId`]: a cache joins
//!   ([`Engine::join`]), every running sequence steps together
//!   ([`Engine::step`]) and leaves ([`Engine::leave`]); see `engine/slots.rs`.
//!
//! Every step writes keys and values into the caches it is given, donated,
//! so a step writes in place. Sampling runs on the host.
//!
//! One cache per layer rather than one tensor pair with a layer axis: with
//! the stacked pair, XLA compiled the prefill 2.2x slower (updates at a
//! dynamic layer index), or decode ran 15 % slower (static slices and a
//! concatenation that rewrites the whole cache each step). The typed calls
//! make the 2 x 30 buffers one value anyway.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use radix::io::{Gguf, WeightStore};
use radix::nn::{CacheType, KvCache, MatrixFormat};
use radix::{Buffer, Bufferized, Compiled, DType, Module, Platform, Program, Shape, Tensor};

use crate::prompt_cache::PromptCache;
use crate::sampling::Sampler;
use crate::transformer::{Decoder, DecoderConfig, Stacked};
use crate::{Error, Result};

mod executables;
mod model_file;
mod open;
mod slots;

pub(crate) use executables::{LayerByLayer, Tokens, TokensWith};
use executables::{StepExe, cache_shapes, step_exe, unrolled_inputs, unrolled_step};
pub use model_file::ModelFile;
pub use open::{config_of, weight_store};
pub use slots::SeqId;
use slots::Slots;

/// How an [`Engine`] runs a step (the prefill of a prompt, or one decoded
/// token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Plan {
    /// One program per step length holding every layer: one dispatch per
    /// step. Consecutive layers of one kind are one loop over their
    /// weights stacked ([`Stacked`]), so the program holds one block per
    /// run of layers and loads from the executable cache about as fast as
    /// the per-block ones; the stacked weights are made on the device by
    /// [`Engine::prepare_weights`] (or the first step), beside the layers'
    /// own (the blocks' weights are held twice), and the cache is one
    /// stack of every layer's. Such an
    /// engine runs one sequence at a time: it holds no slots.
    OneProgram,
    /// Per step length, an embedding, a block and a head executable; the
    /// block executable runs once per layer with that layer's weights and
    /// cache. `2 + layers` dispatches per step, but each program holds one
    /// layer, so it compiles and loads that much faster.
    #[default]
    PerBlock,
}

/// Caches of `shapes` (a layer each) holding zeros, written in place
/// ([`Buffer::zeros`]).
fn zero_caches(platform: &Platform, shapes: &[Shape]) -> Result<Bufferized<Vec<KvCache>>> {
    let caches: Vec<KvCache> = shapes.iter().map(|&s| KvCache::param(s)).collect();
    let zeros = caches.map(&mut String::new(), &mut |_, t| {
        Buffer::zeros(platform, t.shape())
    })?;
    Ok(zeros)
}

/// `new` in the buffers of `old` (donated).
pub(crate) fn in_place((new, old): (KvCache, KvCache)) -> KvCache {
    KvCache {
        k: new.k.reuse_buffer(old.k),
        v: new.v.reuse_buffer(old.v),
    }
}

/// Traces and optimizes the model as one step over `len` tokens with a
/// cache of `capacity` positions per layer, every layer written out (a
/// `func.call` of one block function each): the program the benchmarks
/// trace. [`Plan::OneProgram`] compiles its layers as loops instead
/// ([`Stacked`](crate::transformer::Stacked)).
pub fn trace_step(model: &Decoder, len: usize, capacity: usize) -> radix::Result<Program> {
    radix::trace(model, &unrolled_inputs(model, len, capacity), unrolled_step)
        .map(Program::optimize)
}

/// The prompt-length bucket of `n` tokens: 8, 16, 32, ... (a prefill
/// costs what its bucket's tokens cost: a server's short prompts would
/// spend most of a bucket of 32 on padding).
pub fn bucket(n: usize) -> usize {
    n.max(8).next_power_of_two()
}

/// The key/value cache of one sequence on the device, and how many
/// positions hold tokens: of the engine's capacity, or the first positions
/// of a prompt cache's entry, which only [`Engine::join`] reads.
pub struct Cache {
    pub(crate) buffers: Bufferized<Vec<KvCache>>,
    len: usize,
}

impl Cache {
    /// `buffers` holding `len` positions.
    pub(crate) fn new(buffers: Bufferized<Vec<KvCache>>, len: usize) -> Cache {
        Cache { buffers, len }
    }

    /// How many positions hold tokens.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position holds a token.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many positions its buffers have: the engine's capacity, or
    /// fewer for a prompt cache's entry
    /// ([`PromptCache::lookup_shared`](crate::prompt_cache::PromptCache::lookup_shared)).
    pub fn positions(&self) -> usize {
        let first = self.buffers.first().map(|c| c.k.shape());
        first.and_then(|s| s.dim("k")).unwrap_or(0) as usize
    }
}

/// The result of [`Engine::generate`]: the new tokens and where the
/// time went.
#[derive(Debug, Clone, Default)]
pub struct Generation {
    /// The tokens after the prompt, the end-of-sequence token included.
    pub ids: Vec<u32>,
    /// The prefill of the prompt.
    pub prefill: Duration,
    /// The decode steps.
    pub decode: Duration,
    /// How many decode steps ran.
    pub n_decoded: usize,
}

impl Generation {
    /// Prompt tokens per second of the prefill (`n_prompt` tokens).
    pub fn prefill_tokens_per_s(&self, n_prompt: usize) -> Option<f64> {
        per_s(n_prompt, self.prefill)
    }

    /// Tokens per second of the decode steps.
    pub fn decode_tokens_per_s(&self) -> Option<f64> {
        per_s(self.n_decoded, self.decode)
    }
}

fn per_s(n: usize, time: Duration) -> Option<f64> {
    (n > 0 && !time.is_zero()).then(|| n as f64 / time.as_secs_f64())
}

/// A decoder on a device and the sequences it runs (see the module's
/// documentation): weights uploaded once and shared by the executables of
/// each step, compiled on first use.
pub struct Engine {
    platform: Platform,
    model: Decoder,
    weights: Bufferized<Decoder>,
    capacity: usize,
    /// The ids after which generation stops.
    stops: Vec<u32>,
    plan: Plan,
    /// The weights with the layers stacked, once [`Plan::OneProgram`]
    /// needed them ([`Engine::prepare_weights`]).
    stacked: Option<Bufferized<Stacked>>,
    /// By step length: 1 for decode, a bucket for a prefill.
    steps: HashMap<usize, StepExe>,
    /// By sequence length: the negative log-likelihoods of next tokens.
    nll: HashMap<usize, Compiled<Decoder, Tensor, Tensor>>,
    /// The sequences the engine holds, once [`Engine::open_slots`] made
    /// them.
    slots: Option<Slots>,
}

impl Engine {
    /// An engine for `model` with its `weights` on `platform`; a sequence's
    /// cache holds `capacity` positions; generation stops after `eos` (or
    /// the ids [`Engine::with_stop_ids`] gives). Steps run as
    /// [`Plan::PerBlock`] unless [`Engine::with_plan`] says otherwise.
    pub fn new(
        platform: &Platform,
        model: Decoder,
        weights: Bufferized<Decoder>,
        capacity: usize,
        eos: Option<u32>,
    ) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::Input("a cache of 0 positions".into()));
        }
        Ok(Engine {
            platform: platform.clone(),
            model,
            weights,
            capacity,
            stops: eos.into_iter().collect(),
            plan: Plan::default(),
            stacked: None,
            steps: HashMap::new(),
            nll: HashMap::new(),
            slots: None,
        })
    }

    /// The decoder that `gguf`'s metadata describes, loaded on `platform`
    /// as [`Engine::from_gguf`] loads it.
    pub fn load(
        platform: &Platform,
        gguf: Gguf,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<Self> {
        let model = Decoder::new(&DecoderConfig::from_gguf(&gguf)?);
        Engine::from_gguf(platform, model, gguf, capacity, matrices)
    }

    /// An engine for `model` with its weights read from `gguf` by their
    /// field paths (the file's tensor names), its matrices in the form
    /// `matrices` asks for (as stored: quantized matrices stay quantized),
    /// stopping after the tokens of the file's vocabulary that end a turn
    /// (`tokenizer.ggml.eos_token_id`, and `<end_of_turn>`, `<|im_end|>` or
    /// `<|eot_id|>` where they are control tokens: [`radix_text::turn_end_ids`]).
    pub fn from_gguf(
        platform: &Platform,
        model: Decoder,
        gguf: Gguf,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<Self> {
        let stops = radix_text::turn_end_ids(&gguf);
        let store = WeightStore::new(vec![Box::new(gguf)], str::to_string);
        Engine::from_store(platform, model, &store, capacity, matrices, stops)
    }

    /// An engine for `model` with its weights read from `store` by their
    /// field paths, its matrices in the form `matrices` asks for, stopping
    /// after any of `stops`.
    pub fn from_store(
        platform: &Platform,
        mut model: Decoder,
        store: &WeightStore,
        capacity: usize,
        matrices: MatrixFormat,
        stops: Vec<u32>,
    ) -> Result<Self> {
        radix::nn::set_matrix_formats(&mut model, store, matrices);
        let weights = radix::nn::load_weights(platform, store, &model)?;
        Ok(Engine::new(platform, model, weights, capacity, None)?.with_stop_ids(stops))
    }

    /// The same engine with its steps run as `plan` (compiled anew on first
    /// use).
    pub fn with_plan(self, plan: Plan) -> Self {
        Engine {
            plan,
            steps: HashMap::new(),
            // Only one program reads the stacked weights.
            stacked: self.stacked.filter(|_| plan == Plan::OneProgram),
            ..self
        }
    }

    /// The same engine with key/value caches of `ty` (its steps compiled
    /// anew on first use, its slots to open again). An f16 cache takes half
    /// the memory of an f32 one, a Q8_0 cache 34/128 of it; the kernels
    /// read each as f32. `Err`, naming the head width, for a Q8_0 cache of
    /// heads not a multiple of 32 wide.
    pub fn with_cache_type(self, ty: CacheType) -> Result<Self> {
        Ok(Engine {
            model: self.model.with_cache_type(ty)?,
            steps: HashMap::new(),
            nll: HashMap::new(),
            slots: None,
            ..self
        })
    }

    /// The model (parameters only).
    pub fn model(&self) -> &Decoder {
        &self.model
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &DecoderConfig {
        self.model.config()
    }

    /// The bytes one sequence's key/value cache takes per position, in
    /// this engine's [`CacheType`].
    pub fn cache_bytes_per_position(&self) -> usize {
        self.config()
            .cache_bytes_per_position(self.model.cache_type())
    }

    /// The model's weights on the device.
    pub fn weights(&self) -> &Bufferized<Decoder> {
        &self.weights
    }

    /// The platform the model runs on.
    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    /// The number of positions the cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// An empty [`PromptCache`] for this engine's sequences, of at most
    /// `budget` bytes.
    pub fn prompt_cache(&self, budget: usize) -> PromptCache {
        let shapes = self.model.cache_shapes(self.capacity);
        PromptCache::new(&self.platform, shapes, budget)
    }

    /// The same engine, stopping after any of `ids` instead.
    pub fn with_stop_ids(self, ids: Vec<u32>) -> Self {
        Engine { stops: ids, ..self }
    }

    /// The ids after which generation stops.
    pub fn stop_ids(&self) -> &[u32] {
        &self.stops
    }

    /// Compiles (or loads from the executable cache) the executables of a
    /// prompt of `n` tokens and of decode, so that the first
    /// [`Engine::prefill`] and [`Engine::decode`] only run.
    pub fn compile(&mut self, n: usize) -> Result<()> {
        let len = self.bucket(n)?;
        let lens: Vec<usize> = [len, 1]
            .into_iter()
            .filter(|l| !self.steps.contains_key(l))
            .collect();
        // Each executable is loaded (or compiled) on a thread of its own:
        // a load is mostly the plugin's own work, one thread each, and the
        // first token waits for all of them.
        let (platform, model, capacity, plan) =
            (&self.platform, &self.model, self.capacity, self.plan);
        let steps = std::thread::scope(|scope| {
            let steps: Vec<_> = lens
                .iter()
                .map(|&l| {
                    (
                        l,
                        scope.spawn(move || step_exe(platform, model, plan, capacity, l)),
                    )
                })
                .collect();
            fn join<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            }
            let steps: Vec<(usize, Result<StepExe>)> =
                steps.into_iter().map(|(l, h)| (l, join(h))).collect();
            steps
        });
        for (l, exe) in steps {
            self.steps.insert(l, exe?);
        }
        Ok(())
    }

    /// Drops the executables of a prompt of `n` tokens (never decode's: a
    /// prompt's bucket is at least 8): the next prefill that needs them
    /// loads them again, from the executable cache where
    /// [`Engine::compile`] put them. A server compiles every prompt
    /// bucket when it starts, so that none compiles while it serves, and
    /// keeps loaded only those its prompts use.
    pub fn release(&mut self, n: usize) -> Result<()> {
        let len = self.bucket(n)?;
        self.steps.remove(&len);
        Ok(())
    }

    /// The prompt bucket of `n` tokens (the largest of the steps that
    /// run them), if it fits the cache.
    fn bucket(&self, n: usize) -> Result<usize> {
        let len = bucket(n.min(MOST_STEP_TOKENS));
        if n == 0 || len > self.capacity {
            return Err(Error::Input(format!(
                "{n} tokens (bucket {len}) do not fit the cache of {} positions",
                self.capacity
            )));
        }
        Ok(len)
    }

    /// Compiles the executables of steps over `len` tokens unless they are
    /// there.
    fn ensure_step(&mut self, len: usize) -> Result<()> {
        if !self.steps.contains_key(&len) {
            let exe = step_exe(&self.platform, &self.model, self.plan, self.capacity, len)?;
            self.steps.insert(len, exe);
        }
        Ok(())
    }

    /// Makes the weights the plan's steps read where they are not the
    /// loaded ones: [`Plan::OneProgram`]'s stacked runs ([`Stacked`]), on
    /// the device, beside the layers' own buffers (which the per-layer
    /// programs of perplexity read), so the blocks' weights are held
    /// twice. The first step does it if it is not done; a caller that
    /// times its load does it there.
    pub fn prepare_weights(&mut self) -> Result<()> {
        if self.plan == Plan::OneProgram && self.stacked.is_none() {
            let stacked = Stacked::new(&self.model);
            let weights = stacked.stack_weights(&self.platform, &self.model, &self.weights)?;
            self.stacked = Some(weights);
        }
        Ok(())
    }

    fn i32_scalar(&self, v: usize) -> Result<Buffer> {
        Ok(Buffer::from_slice(
            &self.platform,
            &[v as i32],
            Shape::scalar(DType::I32),
        )?)
    }

    fn ids(&self, ids: &[i32]) -> Result<Buffer> {
        let shape = Shape::tagged(DType::I32, &[("b", 1), ("s", ids.len() as i64)]);
        Ok(Buffer::from_slice(&self.platform, ids, shape)?)
    }

    /// Runs the step over `ids` (its length compiled) placed from position
    /// `start`: the logits at `last` and `caches` with the tokens written.
    fn run_step(
        &mut self,
        ids: &[i32],
        start: usize,
        last: usize,
        caches: Bufferized<Vec<KvCache>>,
    ) -> Result<(Vec<f32>, Bufferized<Vec<KvCache>>)> {
        self.ensure_step(ids.len())?;
        let tokens = TokensWith {
            ids: self.ids(ids)?,
            start: self.i32_scalar(start)?,
            last: self.i32_scalar(last)?,
        };
        self.prepare_weights()?;
        let out = match &self.steps[&ids.len()] {
            StepExe::OneProgram(exe) => {
                let stacked = self.stacked.as_ref().expect("stacked above");
                exe.call(stacked, (tokens, caches))?
            }
            StepExe::PerBlock(exe) => exe.run(&self.weights, tokens, caches)?,
        };
        Ok((out.logits.to_vec::<f32>()?, out.caches))
    }

    /// `-log p(ids[j + 1] | ids[..= j])` for every `j` of `ids` read from
    /// position 0 (`ids.len() - 1` values), in one step over all of `ids`
    /// (compiled once per length; `ids` must fit the cache).
    pub fn next_token_nll(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        let n = ids.len();
        if n < 2 || n > self.capacity {
            return Err(Error::Input(format!(
                "{n} tokens: the likelihood of next tokens needs 2 to {} (the cache)",
                self.capacity
            )));
        }
        if !self.nll.contains_key(&n) {
            let ids = Tensor::param(Shape::tagged(DType::I32, &[("b", 1), ("s", n as i64)]));
            let exe = radix::compile(&self.platform, &self.model, &ids, |m, ids| {
                m.next_token_nll(ids)
            })?;
            self.nll.insert(n, exe);
        }
        let ids: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
        let ids = self.ids(&ids)?;
        Ok(self.nll[&n].call(&self.weights, ids)?.to_vec::<f32>()?)
    }

    /// Runs the prompt `ids` from position 0: the last position's logits and
    /// the cache holding the prompt.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<(Vec<f32>, Cache)> {
        if ids.is_empty() || ids.len() > self.capacity {
            return Err(Error::Input(format!(
                "{} tokens do not fit the cache of {} positions",
                ids.len(),
                self.capacity
            )));
        }
        let mut cache = self.empty_cache()?;
        let logits = self.extend(ids, &mut cache)?;
        Ok((logits, cache))
    }

    /// A cache holding no tokens: zeros ([`Buffer::zeros`], written in place
    /// on the CPU plugin). An executable that made them was one more load
    /// at every start, 3–8 ms of the plugin's own work for a program of one
    /// constant: on a 2-core AMD EPYC, `radix generate`'s executables were
    /// ready from the cache in 24.6 ms (median of 5 rounds of 5–8 runs)
    /// without it against 28.4 ms with it.
    pub fn empty_cache(&mut self) -> Result<Cache> {
        let shapes = cache_shapes(&self.model, self.plan, self.capacity);
        Ok(Cache::new(zero_caches(&self.platform, &shapes)?, 0))
    }

    /// Runs `ids` after the tokens `cache` holds (a prompt's next chunk, or
    /// what follows a prefix from the prompt cache) and writes them into
    /// it: the logits after the last. The tokens run in steps of the
    /// prompt buckets; a step never reaches past the cache's capacity
    /// (a bucket that would is split into smaller ones, the last few
    /// tokens decoded one by one), as the cache write would otherwise be
    /// moved back to fit. The cache's buffers are donated to the steps: on
    /// an error the cache is lost (it holds no tokens then).
    pub fn extend(&mut self, ids: &[u32], cache: &mut Cache) -> Result<Vec<f32>> {
        let (start, n) = (cache.len, ids.len());
        if n == 0 || start + n > self.capacity {
            return Err(Error::Input(format!(
                "{n} tokens after {start} do not fit the cache of {} positions",
                self.capacity
            )));
        }
        let mut buffers = cache.buffers.clone();
        // Spent by the first step: the cache holds nothing until it ends.
        cache.len = 0;
        let mut logits = vec![];
        let mut at = start;
        for piece in pieces(n, self.capacity - start) {
            let (len, take) = (piece.bucket, piece.tokens);
            let mut padded: Vec<i32> = ids[at - start..][..take]
                .iter()
                .map(|&t| t as i32)
                .collect();
            padded.resize(len, 0);
            (logits, buffers) = self.run_step(&padded, at, take - 1, buffers)?;
            at += take;
        }
        *cache = Cache { buffers, len: at };
        Ok(logits)
    }

    /// Appends `token` to `cache` and returns the logits after it. The
    /// cache's buffers are donated to the step, which writes into them.
    pub fn decode(&mut self, token: u32, cache: &mut Cache) -> Result<Vec<f32>> {
        if cache.len >= self.capacity {
            return Err(Error::Input(format!(
                "the cache of {} positions is full",
                self.capacity
            )));
        }
        let (logits, buffers) =
            self.run_step(&[token as i32], cache.len, 0, cache.buffers.clone())?;
        cache.buffers = buffers;
        cache.len += 1;
        Ok(logits)
    }

    /// Generates up to `max_tokens` after `prompt` with the KV cache,
    /// stopping after a stop token, when `pick` (which sees each step's
    /// logits and chooses the next token) returns `None`, or when
    /// `on_token` returns `false`; `on_token` sees each new token as it is
    /// picked, and its errors (of the caller's own type) end the generation
    /// as they are.
    pub fn generate_with<E: From<Error>>(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        mut pick: impl FnMut(&[f32]) -> Option<u32>,
        mut on_token: impl FnMut(u32) -> Result<bool, E>,
    ) -> Result<Generation, E> {
        let mut res = Generation::default();
        if max_tokens == 0 {
            return Ok(res);
        }
        let t = Instant::now();
        let (mut logits, mut cache) = self.prefill(prompt)?;
        res.prefill = t.elapsed();
        let t = Instant::now();
        while let Some(next) = pick(&logits) {
            res.ids.push(next);
            let go_on = on_token(next)?;
            if !go_on || res.ids.len() == max_tokens || self.stops.contains(&next) {
                break;
            }
            logits = self.decode(next, &mut cache)?;
            res.n_decoded += 1;
        }
        res.decode = t.elapsed();
        Ok(res)
    }

    /// [`Engine::generate_with`] without a callback: the new tokens.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampler: &mut Sampler,
    ) -> Result<Vec<u32>> {
        let pick = |logits: &[f32]| Some(sampler.pick(logits) as u32);
        Ok(self
            .generate_with(prompt, max_tokens, pick, |_| Ok::<_, Error>(true))?
            .ids)
    }

    /// Like [`Engine::generate`] without the cache: each step runs the
    /// whole sequence again through the prefill executables.
    pub fn generate_without_cache(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampler: &mut Sampler,
    ) -> Result<Vec<u32>> {
        let mut seq = prompt.to_vec();
        let mut res = vec![];
        while res.len() < max_tokens {
            let (logits, _) = self.prefill(&seq)?;
            let next = sampler.pick(&logits) as u32;
            res.push(next);
            seq.push(next);
            if self.stops.contains(&next) {
                break;
            }
        }
        Ok(res)
    }
}

/// One step of [`Engine::extend`]: `tokens` tokens padded to a step of
/// `bucket`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    tokens: usize,
    bucket: usize,
}

/// The most tokens one step of [`Engine::extend`] runs. Longer prompts
/// run in steps of this many: a step's queries attend to every position
/// before them, padding included, so one bucket of 2,048 for a prompt of
/// 1,215 tokens did 2.7 times the attention work of the prompt (and 1.7
/// times its products); in steps of 512 (or 256, or 1,024: the same
/// within 2 %) SmolLM2's prefill of those tokens ran at 415 tokens/s
/// instead of 183, on a 2-core Xeon with AVX-512 VNNI.
pub const MOST_STEP_TOKENS: usize = 512;

/// How [`Engine::extend`] runs `n` tokens with `room` positions left in
/// the cache (`n <= room`): one bucket when it fits (and holds at most
/// [`MOST_STEP_TOKENS`]), else the largest bucket that does, filled, and
/// so on; the last tokens one at a time (a decode step) once even the
/// smallest bucket would not fit.
fn pieces(mut n: usize, mut room: usize) -> Vec<Piece> {
    let mut out = vec![];
    while n > 0 {
        let cap = room.min(MOST_STEP_TOKENS);
        let piece = if bucket(n) <= cap {
            Piece {
                tokens: n,
                bucket: bucket(n),
            }
        } else if cap >= bucket(1) {
            let fits = 1 << cap.ilog2();
            Piece {
                tokens: fits.min(n),
                bucket: fits,
            }
        } else {
            Piece {
                tokens: 1,
                bucket: 1,
            }
        };
        n -= piece.tokens;
        room -= piece.tokens;
        out.push(piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_stay_inside_the_cache() {
        let p = |tokens, bucket| Piece { tokens, bucket };
        assert_eq!(pieces(100, 1024), [p(100, 128)]);
        assert_eq!(
            pieces(100, 100),
            [p(64, 64), p(32, 32), p(1, 1), p(1, 1), p(1, 1), p(1, 1)]
        );
        assert_eq!(pieces(3, 5), [p(1, 1), p(1, 1), p(1, 1)]);
        assert_eq!(pieces(20, 24), [p(16, 16), p(4, 8)]);
        assert_eq!(pieces(1215, 2048), [p(512, 512), p(512, 512), p(191, 256)]);
        for room in 1..300 {
            for n in 1..=room {
                let ps = pieces(n, room);
                assert_eq!(ps.iter().map(|p| p.tokens).sum::<usize>(), n);
                // Each step's padded bucket fits the room left before it.
                let mut left = room;
                for p in &ps {
                    assert!(
                        p.bucket <= left && p.tokens <= p.bucket,
                        "{n} in {room}: {ps:?}"
                    );
                    left -= p.tokens;
                }
            }
        }
    }

    #[test]
    fn buckets() {
        assert_eq!(bucket(1), 8);
        assert_eq!(bucket(9), 16);
        assert_eq!(bucket(33), 64);
        assert_eq!(bucket(128), 128);
    }
}
