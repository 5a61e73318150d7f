//! The engine's slots: every sequence it holds steps in one batched step
//! (continuous batching).
//!
//! [`Engine::open_slots`] makes room for up to `slots` sequences: one cache
//! per layer with a row per slot, `(slots, capacity, h, hd)`, the running
//! sequences in its first rows. A sequence's cache (a prefilled prompt, a
//! prompt cache's hit, or an empty one) joins ([`Engine::join`]) by being
//! copied into the next free row, and is named by a [`SeqId`] from then
//! on; a sequence that leaves ([`Engine::leave`]) gets the last row copied
//! over it (as `Vec::swap_remove` moves elements), which moves no other
//! sequence's id. A step over `n` running rows runs the executable of the
//! smallest compiled batch size (bucket) `b >= n` on the whole cache,
//! donated: it scatters each row's keys and values at the row's own
//! positions, in place, and attends over the first `b` rows, so a step
//! moves no cache but what attention reads.
//!
//! A step gives each sequence its own tokens ([`Engine::step`]): one for a
//! sequence decoding, several for one whose prompt is still running (the
//! rest of a prompt after a prompt cache's hit, or a short prompt), so that
//! prompts arriving together run in one step beside the decoding rows, as
//! vLLM's and llama.cpp's batches mix them. Its tokens per row are padded
//! to a bucket `s` (1, then powers of two from 8); a padding token is
//! written past its row's tokens, where the row's next token overwrites it
//! before any query reads it, or dropped past the capacity.
//!
//! A sequence running alone keeps its own cache and steps as a caller's
//! sequence does ([`Engine::decode`], as `radix generate`): no bucket of 1
//! row works among several slots (see [`Engine::open_slots`]), and the
//! smallest, 2, does twice the work. Its cache moves into row 0 when a
//! second sequence joins, and back out when one is left.
//!
//! *Invariant:* an error from [`Engine::join`], [`Engine::step`] or
//! [`Engine::leave`] ends every sequence: the slots are empty after it (a
//! failed call may have given the caches to an executable), so the caller
//! fails all the sequences it ran and the next join starts afresh. No
//! sequence is ever left in a slot without its caller knowing it.

use std::collections::HashMap;

use radix::nn::KvCache;
use radix::{Buffer, Bufferized, Compiled, DType, Platform, Shape, Tensor};

use super::{Cache, Engine, LayerByLayer, Plan, Tokens, TokensWith, bucket};
use crate::prompt_cache::resized;
use crate::transformer::Decoder;
use crate::{Error, Result};

/// Each layer's cache of every slot, or of one sequence.
type Caches = Vec<KvCache>;

/// The slots' caches, one sequence's caches and the slot to copy them into.
type Put = Compiled<(), (Caches, Caches, Tensor), Caches>;
/// The slots' caches and the slots to copy from and to.
type Move = Compiled<(), (Caches, Tensor, Tensor), Caches>;

/// A sequence in the engine's slots, from [`Engine::join`] until
/// [`Engine::leave`] (or an error that ends every sequence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeqId(u64);

/// The sequences an engine holds.
pub(super) struct Slots {
    slots: usize,
    /// The slots' cache shapes, a layer each.
    shapes: Vec<Shape>,
    /// Batch sizes, ascending: 1 (a sequence alone, through the engine's
    /// own steps), then the compiled ones; the last is `slots`.
    buckets: Vec<usize>,
    /// By batch size and tokens per row, each step run layer by layer (a
    /// bucket's program holds one layer, not the model: as one program,
    /// the four decode buckets of 16 slots held ~150 MB of a server's
    /// memory). Those of one token per row (decoding) are compiled by
    /// [`Engine::open_slots`], the others when first run.
    steps: HashMap<(usize, usize), LayerByLayer>,
    /// By the positions of the cache joining (the capacity, or a prompt
    /// cache entry's fewer): the copy of it into a row. The others than
    /// the capacity's are compiled when first needed.
    puts: HashMap<usize, Put>,
    moves: Move,
    /// Row `i` of the slots' caches as one sequence's caches.
    take: Compiled<(), (Caches, Tensor), Caches>,
    /// The cache of the one sequence running, when it runs alone.
    alone: Option<Cache>,
    /// The slots' caches; `None` after a failed step took them.
    caches: Option<Bufferized<Caches>>,
    /// Per running row: its sequence and how many positions hold tokens.
    rows: Vec<(SeqId, usize)>,
    /// The id the next sequence to join gets.
    next: u64,
}

impl Engine {
    /// Makes room for up to `slots` sequences held by the engine (ending
    /// any it held): compiles (or loads from the executable cache) the
    /// decode step of every bucket of several rows: powers of two from 2
    /// below `slots`, and `slots`; and makes the slots' caches. One
    /// sequence alone decodes with the engine's own step, which
    /// [`Engine::compile`] makes.
    pub fn open_slots(&mut self, slots: usize) -> Result<()> {
        self.slots = None;
        if slots == 0 {
            return Err(Error::Input("a batch of 0 slots".into()));
        }
        if self.plan == Plan::OneProgram {
            // A slot's sequence alone takes the engine's own step, whose
            // cache would be a stack of every layer's, and the slots hold
            // a cache per layer.
            return Err(Error::Input(
                "slots run with Plan::PerBlock; this engine's plan is OneProgram".into(),
            ));
        }
        let (platform, model) = (&self.platform, &self.model);
        let one = model.cache_shapes(self.capacity);
        let all: Vec<Shape> = one.iter().map(|&s| with_rows(s, slots)).collect();
        let index = || Tensor::param(Shape::scalar(DType::I32));
        // No bucket of 1 row among several slots: XLA's CPU backend turned
        // its one-row scatter into an update that it fused into the
        // attention's read of the same row, and so copied every layer's
        // whole cache each step to keep the original (a step of 16 slots
        // took 0.9 s); from 2 rows on the scatter is written in place. A
        // sequence alone runs outside the slots (`alone`).
        let mut buckets: Vec<usize> = std::iter::successors(Some(1), |b| Some(b * 2))
            .take_while(|&b| b < slots)
            .collect();
        buckets.push(slots);
        let mut steps = HashMap::new();
        for &b in buckets.iter().filter(|&&b| b > 1) {
            steps.insert((b, 1), compile_rows(platform, model, &all, b, 1)?);
        }
        let puts = HashMap::from([(self.capacity, compile_put(platform, &all, &one)?)]);
        let moves = radix::compile_fn(
            platform,
            &(params(&all), index(), index()),
            |(all, from, to)| {
                let rows: Vec<KvCache> = all.iter().map(|c| row_of(c, from)).collect();
                copy_rows(&all, &rows, to)
            },
        )?;
        let take = radix::compile_fn(platform, &(params(&all), index()), |(all, from)| {
            all.iter().map(|c| row_of(c, from)).collect::<Caches>()
        })?;
        // Made now, not when a second sequence joins: the first touch of
        // every page of the slots' caches (755 MB for 16 slots of 2,048
        // positions) took 1.1 s, which that sequence waited for.
        let caches = Some(super::zero_caches(platform, &all)?);
        self.slots = Some(Slots {
            slots,
            shapes: all,
            buckets,
            steps,
            puts,
            moves,
            take,
            alone: None,
            caches,
            rows: vec![],
            next: 0,
        });
        Ok(())
    }

    /// The batch sizes of the slots, ascending: 1 (a sequence alone,
    /// through the engine's own steps), then those of the compiled batch
    /// steps; none before [`Engine::open_slots`].
    pub fn slot_buckets(&self) -> &[usize] {
        self.slots.as_ref().map_or(&[], |s| &s.buckets)
    }

    /// How many sequences the slots hold.
    pub fn running(&self) -> usize {
        self.slots.as_ref().map_or(0, |s| s.rows.len())
    }

    /// Whether `id` is a sequence the slots hold.
    pub fn holds(&self, id: SeqId) -> bool {
        self.slots.as_ref().is_some_and(|s| s.row(id).is_ok())
    }

    /// Whether every slot is taken (or none was opened).
    pub fn is_full(&self) -> bool {
        self.slots.as_ref().is_none_or(|s| s.rows.len() == s.slots)
    }

    /// Takes a sequence whose tokens `cache` holds (from
    /// [`Engine::prefill`], [`Engine::empty_cache`] or a prompt cache's
    /// hit, whether its own or the entry itself) into the next free slot:
    /// its id. An error ends every sequence.
    pub fn join(&mut self, cache: Cache) -> Result<SeqId> {
        self.with_slots(|slots, engine| slots.join(engine, cache))
    }

    /// Appends to each running sequence its tokens, `tokens[i] = (id,
    /// tokens)` (at least one token; every running sequence once), in one
    /// step: the logits after each one's last token, in the order given.
    /// A failed step ends every sequence (their caches were given to it).
    pub fn step(&mut self, tokens: &[(SeqId, &[u32])]) -> Result<Vec<Vec<f32>>> {
        self.with_slots(|slots, engine| slots.step(engine, tokens))
    }

    /// The cache of sequence `id`, holding its tokens so far: a copy, or
    /// the sequence's own cache when it runs alone (then valid until the
    /// next step, which is given it).
    pub fn sequence_cache(&self, id: SeqId) -> Result<Cache> {
        let slots = self.slots.as_ref().ok_or_else(no_slots)?;
        let row = slots.row(id)?;
        let len = slots.rows[row].1;
        if let Some(alone) = &slots.alone {
            return Ok(Cache::new(alone.buffers.clone(), len));
        }
        let all = (slots.caches.clone())
            .ok_or_else(|| Error::Input("the slots hold no caches".into()))?;
        let at = self.i32_scalar(row)?;
        Ok(Cache::new(slots.take.call_fn((all, at))?, len))
    }

    /// Ends sequence `id` and frees its slot. An error ends every sequence.
    pub fn leave(&mut self, id: SeqId) -> Result<()> {
        self.with_slots(|slots, engine| slots.leave(engine, id))
    }

    /// Runs `f` on the slots and the engine beside them; an error empties
    /// the slots (see the module's invariant).
    fn with_slots<T>(&mut self, f: impl FnOnce(&mut Slots, &mut Engine) -> Result<T>) -> Result<T> {
        let mut slots = self.slots.take().ok_or_else(no_slots)?;
        let res = f(&mut slots, self);
        if res.is_err() {
            slots.rows.clear();
            slots.alone = None;
        }
        self.slots = Some(slots);
        res
    }
}

/// The error of a slot operation before [`Engine::open_slots`].
fn no_slots() -> Error {
    Error::Input("the engine holds no slots (Engine::open_slots)".into())
}

impl Slots {
    /// The row of sequence `id`.
    fn row(&self, id: SeqId) -> Result<usize> {
        (self.rows.iter().position(|&(r, _)| r == id))
            .ok_or_else(|| Error::Input(format!("no running sequence {id:?}")))
    }

    /// The slots' caches, made empty if a failed step took them.
    fn take_caches(&mut self, platform: &Platform) -> Result<Bufferized<Caches>> {
        match self.caches.take() {
            Some(c) => Ok(c),
            None => super::zero_caches(platform, &self.shapes),
        }
    }

    fn join(&mut self, engine: &Engine, cache: Cache) -> Result<SeqId> {
        if self.rows.len() == self.slots {
            return Err(Error::Input(format!("all {} slots are taken", self.slots)));
        }
        let (row, len) = (self.rows.len(), cache.len());
        if row == 0 && cache.positions() == engine.capacity {
            self.alone = Some(cache);
        } else if row == 0 {
            // A prompt cache's entry: the one sequence runs from a cache of
            // its own, copied out of a free row.
            self.put_row(engine, cache, 0)?;
            self.alone = Some(self.row_cache(engine, 0, len)?);
        } else {
            if let Some(first) = self.alone.take() {
                self.put_row(engine, first, 0)?;
            }
            self.put_row(engine, cache, row)?;
        }
        let id = SeqId(self.next);
        self.next += 1;
        self.rows.push((id, len));
        Ok(id)
    }

    /// Copies one sequence's `cache` into row `row` of the slots' caches.
    fn put_row(&mut self, engine: &Engine, cache: Cache, row: usize) -> Result<()> {
        let positions = cache.positions();
        if !self.puts.contains_key(&positions) {
            let one: Vec<Shape> = (self.shapes.iter())
                .map(|&s| resized(with_rows(s, 1), "k", positions))
                .collect();
            let put = compile_put(&engine.platform, &self.shapes, &one)?;
            self.puts.insert(positions, put);
        }
        let all = self.take_caches(&engine.platform)?;
        let to = engine.i32_scalar(row)?;
        self.caches = Some(self.puts[&positions].call_fn((all, cache.buffers, to))?);
        Ok(())
    }

    /// A copy of row `row` of the slots' caches, holding `len` tokens: a
    /// cache of one sequence's own.
    fn row_cache(&mut self, engine: &Engine, row: usize, len: usize) -> Result<Cache> {
        let all = self.take_caches(&engine.platform)?;
        let copy =
            (engine.i32_scalar(row)).and_then(|at| Ok(self.take.call_fn((all.clone(), at))?));
        self.caches = Some(all);
        Ok(Cache::new(copy?, len))
    }

    /// Each running row's tokens, from `tokens` by id: every running
    /// sequence once, each with at least one token that fits its cache.
    fn tokens_by_row<'a>(
        &self,
        tokens: &[(SeqId, &'a [u32])],
        capacity: usize,
    ) -> Result<Vec<&'a [u32]>> {
        let n = self.rows.len();
        if tokens.len() != n || n == 0 {
            return Err(Error::Input(format!(
                "tokens of {} sequences for {n} running",
                tokens.len()
            )));
        }
        let mut by_row: Vec<Option<&[u32]>> = vec![None; n];
        for &(id, t) in tokens {
            let row = self.row(id)?;
            let len = self.rows[row].1;
            if t.is_empty() {
                return Err(Error::Input(format!("no token for sequence {id:?}")));
            }
            if len + t.len() > capacity {
                return Err(Error::Input(format!(
                    "{} tokens after the {len} of sequence {id:?} do not fit its cache of \
                     {capacity} positions",
                    t.len()
                )));
            }
            if by_row[row].replace(t).is_some() {
                return Err(Error::Input(format!("sequence {id:?} given tokens twice")));
            }
        }
        Ok(by_row
            .into_iter()
            .map(|t| t.expect("every row once"))
            .collect())
    }

    fn step(&mut self, engine: &mut Engine, tokens: &[(SeqId, &[u32])]) -> Result<Vec<Vec<f32>>> {
        let rows = self.tokens_by_row(tokens, engine.capacity)?;
        let logits = self.step_rows(engine, &rows)?;
        for (row, r) in self.rows.iter_mut().zip(&rows) {
            row.1 += r.len();
        }
        // Back in the caller's order.
        let mut by_row: Vec<Option<Vec<f32>>> = logits.into_iter().map(Some).collect();
        tokens
            .iter()
            .map(|&(id, _)| {
                let row = self.row(id)?;
                Ok(by_row[row].take().expect("each row's logits once"))
            })
            .collect()
    }

    /// The step of every running row over its `rows` tokens: the logits
    /// after each row's last.
    fn step_rows(&mut self, engine: &mut Engine, rows: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        if let Some(mut cache) = self.alone.take() {
            let logits = match rows[0] {
                [token] => engine.decode(*token, &mut cache)?,
                tokens => engine.extend(tokens, &mut cache)?,
            };
            self.alone = Some(cache);
            return Ok(vec![logits]);
        }
        let n = rows.len();
        let b = (self.buckets.iter().copied())
            .find(|&b| b >= n)
            .unwrap_or(self.slots);
        let s = match rows.iter().map(|r| r.len()).max().unwrap_or(1) {
            1 => 1,
            longest => bucket(longest),
        };
        // Padding (after a row's tokens, and the rows of free slots) is
        // token 0, written where no running sequence reads it: past a
        // row's tokens, or at the start of a free row.
        let mut ids = vec![0i32; b * s];
        let mut starts = vec![0i32; b];
        let mut lasts = vec![0i32; b];
        for (i, (r, &(_, len))) in rows.iter().zip(&self.rows).enumerate() {
            for (to, &t) in ids[i * s..].iter_mut().zip(*r) {
                *to = t as i32;
            }
            starts[i] = len as i32;
            lasts[i] = r.len() as i32 - 1;
        }
        let platform = &engine.platform;
        let tagged = |dims: &[(&str, i64)]| Shape::tagged(DType::I32, dims);
        let (bi, si) = (b as i64, s as i64);
        let ids = Buffer::from_slice(platform, &ids, tagged(&[("b", bi), ("s", si)]))?;
        let starts = Buffer::from_slice(platform, &starts, tagged(&[("b", bi)]))?;
        let lasts = Buffer::from_slice(platform, &lasts, tagged(&[("b", bi)]))?;
        if !self.steps.contains_key(&(b, s)) {
            let step = compile_rows(platform, &engine.model, &self.shapes, b, s)?;
            self.steps.insert((b, s), step);
        }
        let caches = self.take_caches(&engine.platform)?;
        let step = &self.steps[&(b, s)];
        let tokens = TokensWith {
            ids,
            start: starts,
            last: lasts,
        };
        let out = step.run(&engine.weights, tokens, caches)?;
        self.caches = Some(out.caches);
        let logits = out.logits.to_vec::<f32>()?;
        let voc = logits.len() / b;
        Ok(logits.chunks(voc).take(n).map(<[f32]>::to_vec).collect())
    }

    fn leave(&mut self, engine: &Engine, id: SeqId) -> Result<()> {
        let row = self.row(id)?;
        let last = self.rows.len() - 1;
        if self.alone.take().is_some() {
            self.rows.clear();
            return Ok(());
        }
        if row != last {
            let all = self.take_caches(&engine.platform)?;
            let (from, to) = (engine.i32_scalar(last)?, engine.i32_scalar(row)?);
            self.caches = Some(self.moves.call_fn((all, from, to))?);
        }
        self.rows.swap_remove(row);
        if let [(_, len)] = self.rows[..] {
            // The one left runs alone again, from its own cache; if that
            // fails, it ends, as after a failed step.
            self.alone = Some(self.row_cache(engine, 0, len)?);
        }
        Ok(())
    }
}

/// `shape` (a cache's, [`KvCache::shape`]) with `rows` rows.
fn with_rows(shape: Shape, rows: usize) -> Shape {
    resized(shape, "b", rows)
}

/// The copy of one sequence's caches, of shapes `one` (a layer each),
/// into a row of the slots' caches, of shapes `all`, from its position 0.
fn compile_put(platform: &Platform, all: &[Shape], one: &[Shape]) -> Result<Put> {
    let index = Tensor::param(Shape::scalar(DType::I32));
    let put = radix::compile_fn(
        platform,
        &(params(all), params(one), index),
        |(all, one, to)| {
            let rows: Vec<KvCache> = one
                .iter()
                .map(|c| row_of(c, Tensor::scalar(0.0, DType::I32)))
                .collect();
            copy_rows(&all, &rows, to)
        },
    )?;
    Ok(put)
}

/// Row `at` (rank-0 `i32`) of `cache`, as a one-row cache.
fn row_of(cache: &KvCache, at: Tensor) -> KvCache {
    let zero = Tensor::scalar(0.0, DType::I32);
    let part = |t: Tensor| {
        let d = t.shape().dims().to_vec();
        t.dynamic_slice(&[at, zero, zero, zero], &[1, d[1], d[2], d[3]])
    };
    KvCache {
        k: part(cache.k),
        v: part(cache.v),
    }
}

/// `all` with `rows` (one row per layer) written at row `to`, in `all`'s
/// buffers (donated).
fn copy_rows(all: &[KvCache], rows: &[KvCache], to: Tensor) -> Caches {
    let zero = Tensor::scalar(0.0, DType::I32);
    let at = [to, zero, zero, zero];
    all.iter()
        .zip(rows)
        .map(|(a, r)| KvCache {
            k: a.k.dynamic_update_slice(r.k, &at).reuse_buffer(a.k),
            v: a.v.dynamic_update_slice(r.v, &at).reuse_buffer(a.v),
        })
        .collect()
}

/// The step of `b` rows of `s` tokens each over the slots' caches of
/// shapes `all` (a layer each): logits `(b, voc)` after each row's last
/// token, and the caches with each row's tokens written from its own
/// position, in their buffers.
fn compile_rows(
    platform: &Platform,
    model: &Decoder,
    all: &[Shape],
    b: usize,
    s: usize,
) -> Result<LayerByLayer> {
    let tagged = |dims: &[(&str, i64)]| Tensor::param(Shape::tagged(DType::I32, dims));
    let (b, s) = (b as i64, s as i64);
    let tokens = Tokens {
        ids: tagged(&[("b", b), ("s", s)]),
        start: tagged(&[("b", b)]),
        last: tagged(&[("b", b)]),
    };
    LayerByLayer::compile(
        platform,
        model,
        tokens,
        all[0],
        |m, (ids, starts)| m.embed_rows(ids, starts),
        |m, (x, lasts)| m.head(at_lasts(x, lasts), Tensor::scalar(0.0, DType::I32)),
    )
}

/// Placeholders of caches of `shapes`.
fn params(shapes: &[Shape]) -> Caches {
    shapes.iter().map(|&s| KvCache::param(s)).collect()
}

/// Row `i` of `x` `(b, s, d)` at position `lasts[i]`, as `(b, 1, d)`: a
/// sum over a one-hot select, exact, and blind to whatever the padding
/// holds.
fn at_lasts(x: Tensor, lasts: Tensor) -> Tensor {
    if x.dim("s") == 1 {
        return x;
    }
    let grid = Shape::tagged(lasts.dtype(), &[("b", x.dim("b")), ("s", x.dim("s"))]);
    let pick = Tensor::iota(grid, "s").eq(lasts.broadcast(grid));
    let zero = Tensor::scalar(0.0, x.dtype());
    pick.broadcast(x.shape().with_dtype(DType::Bool))
        .select(x, zero)
        .sum("s")
        .unsqueeze(1, "s")
}
