//! Continuous batching: every running sequence decodes in one step.
//!
//! A [`Batch`] runs up to `slots` sequences beside a [`Generator`] that owns
//! the weights and prefills prompts. It holds one cache per layer with a row
//! per slot, `(slots, capacity, h, hd)`, and the running sequences occupy
//! its first rows. A sequence's cache (a prefilled prompt, a prompt cache's
//! hit, or an empty one) is copied into the next free row; a sequence that
//! leaves gets the last row copied over it (as `Vec::swap_remove` moves
//! elements). A step over `n` running rows runs the executable of the
//! smallest compiled batch size (bucket) `b >= n` on the whole cache,
//! donated: it scatters each row's keys and values at the row's own
//! positions, in place, and attends over the first `b` rows, so a step
//! moves no cache but what attention reads.
//!
//! A step gives each row its own tokens ([`Batch::extend`]): one for a
//! sequence decoding, several for one whose prompt is still running (the
//! rest of a prompt after a prompt cache's hit, or a short prompt), so that
//! prompts arriving together run in one step beside the decoding rows, as
//! vLLM's and llama.cpp's batches mix them. Its tokens per row are padded
//! to a bucket `s` (1, then powers of two from 8); a padding token is
//! written past its row's tokens, where the row's next token overwrites it
//! before any query reads it, or dropped past the capacity.
//!
//! A sequence running alone keeps its own cache and decodes through the
//! [`Generator`], as `radix generate` does: no bucket of 1 row works among
//! several slots (see [`Batch::new`]), and the smallest, 2, does twice the
//! work. Its cache moves into row 0 when a second sequence joins, and back
//! out when one is left.
//!
//! *Invariant:* an error from [`Batch::insert`], [`Batch::step`] or
//! [`Batch::remove`] ends every sequence: the batch is empty after it (a
//! failed call may have given the caches to an executable), so the caller
//! fails all the sequences it ran and the next insert starts afresh. No
//! row is ever left without its caller knowing it.

use std::collections::HashMap;

use radix::nn::KvCache;
use radix::{Buffer, Bufferized, Compiled, DType, Platform, Shape, Tensor};

use crate::generate::{Cache, CausalLm, Generator, LayerByLayer, Tokens, TokensWith, bucket};
use crate::{Error, Result};

/// Each layer's cache of every slot, or of one sequence.
type Caches = Vec<KvCache>;

/// The step of `b` rows of `s` tokens each, layer by layer: a bucket's
/// program holds one layer, not the model (as one program, the four
/// decode buckets of 16 slots held ~150 MB of a server's memory).
type RowsStep<M> = LayerByLayer<M>;
/// The slots' caches, one sequence's caches and the slot to copy them into.
type Put = Compiled<(), (Caches, Caches, Tensor), Caches>;
/// The slots' caches and the slots to copy from and to.
type Move = Compiled<(), (Caches, Tensor, Tensor), Caches>;

/// Sequences decoding together.
pub struct Batch<M: CausalLm> {
    platform: Platform,
    slots: usize,
    capacity: usize,
    /// The slots' cache shapes, a layer each.
    shapes: Vec<Shape>,
    /// Batch sizes, ascending: 1 (a sequence alone, through the
    /// generator), then the compiled ones; the last is `slots`.
    buckets: Vec<usize>,
    /// By batch size and tokens per row; those of one token per row
    /// (decoding) are compiled by [`Batch::new`], the others when first
    /// run.
    steps: HashMap<(usize, usize), RowsStep<M>>,
    put: Put,
    moves: Move,
    /// Makes the slots' empty caches.
    zeros: Compiled<(), (), Caches>,
    /// Row `i` of the slots' caches as one sequence's caches.
    take: Compiled<(), (Caches, Tensor), Caches>,
    /// The cache of the one sequence running, when it runs alone.
    alone: Option<Cache>,
    /// The slots' caches; `None` after a failed step took them.
    caches: Option<Bufferized<Caches>>,
    /// Per running row: how many positions hold tokens.
    lens: Vec<usize>,
}

impl<M: CausalLm> Batch<M> {
    /// Up to `slots` sequences of `generator`'s model with caches of its
    /// capacity; compiles (or loads from the executable cache) the decode
    /// step of every bucket of several rows: powers of two from 2 below
    /// `slots`, and `slots`. One sequence alone decodes with the
    /// generator's own step, which [`Generator::compile`] makes.
    pub fn new(generator: &Generator<M>, slots: usize) -> Result<Batch<M>> {
        if slots == 0 {
            return Err(Error::Input("a batch of 0 slots".into()));
        }
        let (platform, model) = (generator.platform(), generator.model());
        let capacity = generator.capacity();
        let one = model.cache_shapes(capacity);
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
        let put = radix::compile_fn(
            platform,
            &(params(&all), params(&one), index()),
            |(all, one, to)| {
                let rows: Vec<KvCache> = one
                    .iter()
                    .map(|c| row_of(c, Tensor::scalar(0.0, DType::I32)))
                    .collect();
                copy_rows(&all, &rows, to)
            },
        )?;
        let moves = radix::compile_fn(
            platform,
            &(params(&all), index(), index()),
            |(all, from, to)| {
                let rows: Vec<KvCache> = all.iter().map(|c| row_of(c, from)).collect();
                copy_rows(&all, &rows, to)
            },
        )?;
        let zeros = radix::compile_fn(platform, &(), |()| {
            all.iter().map(|&s| KvCache::zeros(s)).collect::<Caches>()
        })?;
        let take = radix::compile_fn(platform, &(params(&all), index()), |(all, from)| {
            all.iter().map(|c| row_of(c, from)).collect::<Caches>()
        })?;
        Ok(Batch {
            platform: platform.clone(),
            slots,
            capacity,
            shapes: all,
            buckets,
            steps,
            put,
            moves,
            zeros,
            take,
            alone: None,
            caches: None,
            lens: vec![],
        })
    }

    /// The batch sizes, ascending: 1 (a sequence alone, through the
    /// generator's steps), then those of the compiled batch steps.
    pub fn buckets(&self) -> &[usize] {
        &self.buckets
    }

    /// How many sequences run.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// Whether no sequence runs.
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// Whether every slot is taken.
    pub fn is_full(&self) -> bool {
        self.lens.len() == self.slots
    }

    /// `i` as a rank-0 `i32` buffer.
    fn index(&self, i: usize) -> Result<Buffer> {
        Ok(Buffer::from_slice(
            &self.platform,
            &[i as i32],
            Shape::scalar(DType::I32),
        )?)
    }

    /// The slots' caches, made empty if a failed step took them.
    fn take_caches(&mut self) -> Result<Bufferized<Caches>> {
        match self.caches.take() {
            Some(c) => Ok(c),
            None => Ok(self.zeros.call_fn(())?),
        }
    }

    /// Takes a sequence prefilled by [`Generator::prefill`] (its `cache`,
    /// copied into the next free row, or kept as it is when it runs alone):
    /// that row's index. An error empties the batch.
    pub fn insert(&mut self, cache: Cache) -> Result<usize> {
        let res = self.try_insert(cache);
        self.clear_on_error(res)
    }

    /// Empties the batch if `res` is an error (see the module's invariant).
    fn clear_on_error<T>(&mut self, res: Result<T>) -> Result<T> {
        if res.is_err() {
            self.lens.clear();
            self.alone = None;
        }
        res
    }

    fn try_insert(&mut self, cache: Cache) -> Result<usize> {
        if self.is_full() {
            return Err(Error::Input(format!("all {} slots are taken", self.slots)));
        }
        let (row, len) = (self.lens.len(), cache.len());
        if row == 0 {
            self.alone = Some(cache);
        } else {
            if let Some(first) = self.alone.take() {
                self.put_row(first, 0)?;
            }
            self.put_row(cache, row)?;
        }
        self.lens.push(len);
        Ok(row)
    }

    /// Copies one sequence's `cache` into row `row` of the slots' caches.
    fn put_row(&mut self, cache: Cache, row: usize) -> Result<()> {
        let all = self.take_caches()?;
        let to = self.index(row)?;
        self.caches = Some(self.put.call_fn((all, cache.buffers, to))?);
        Ok(())
    }

    /// Appends `tokens[i]` to row `i`'s sequence, for every running row,
    /// in one step: the logits after each. A failed step ends every
    /// sequence (their caches were given to it): the batch is empty.
    pub fn step(&mut self, generator: &mut Generator<M>, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let rows: Vec<&[u32]> = tokens.iter().map(std::slice::from_ref).collect();
        self.extend(generator, &rows)
    }

    /// Appends the tokens `rows[i]` (at least one) to row `i`'s sequence,
    /// for every running row, in one step: the logits after each row's
    /// last token. A failed step ends every sequence (their caches were
    /// given to it): the batch is empty.
    pub fn extend(
        &mut self,
        generator: &mut Generator<M>,
        rows: &[&[u32]],
    ) -> Result<Vec<Vec<f32>>> {
        let res = self.try_extend(generator, rows);
        self.clear_on_error(res)
    }

    fn try_extend(
        &mut self,
        generator: &mut Generator<M>,
        rows: &[&[u32]],
    ) -> Result<Vec<Vec<f32>>> {
        let n = self.lens.len();
        if rows.len() != n || n == 0 {
            return Err(Error::Input(format!(
                "tokens of {} rows for {n} running sequences",
                rows.len()
            )));
        }
        if let Some(i) = rows.iter().position(|r| r.is_empty()) {
            return Err(Error::Input(format!("no token for row {i}")));
        }
        for (i, (&len, r)) in self.lens.iter().zip(rows).enumerate() {
            if len + r.len() > self.capacity {
                return Err(Error::Input(format!(
                    "{} tokens after the {len} of row {i} do not fit its cache of {} positions",
                    r.len(),
                    self.capacity
                )));
            }
        }
        if let Some(mut cache) = self.alone.take() {
            let logits = match rows[0] {
                [token] => generator.decode(*token, &mut cache)?,
                tokens => generator.extend(tokens, &mut cache)?,
            };
            self.alone = Some(cache);
            self.lens[0] += rows[0].len();
            return Ok(vec![logits]);
        }
        let b = self
            .buckets
            .iter()
            .copied()
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
        for (i, (r, &len)) in rows.iter().zip(&self.lens).enumerate() {
            for (to, &t) in ids[i * s..].iter_mut().zip(*r) {
                *to = t as i32;
            }
            starts[i] = len as i32;
            lasts[i] = r.len() as i32 - 1;
        }
        let platform = generator.platform();
        let tagged = |dims: &[(&str, i64)]| Shape::tagged(DType::I32, dims);
        let (bi, si) = (b as i64, s as i64);
        let ids = Buffer::from_slice(platform, &ids, tagged(&[("b", bi), ("s", si)]))?;
        let starts = Buffer::from_slice(platform, &starts, tagged(&[("b", bi)]))?;
        let lasts = Buffer::from_slice(platform, &lasts, tagged(&[("b", bi)]))?;
        if !self.steps.contains_key(&(b, s)) {
            let step = compile_rows(platform, generator.model(), &self.shapes, b, s)?;
            self.steps.insert((b, s), step);
        }
        let caches = self.take_caches()?;
        let step = &self.steps[&(b, s)];
        let tokens = TokensWith {
            ids,
            start: starts,
            last: lasts,
        };
        let out = step.run(generator.weights(), tokens, caches)?;
        self.caches = Some(out.caches);
        for (len, r) in self.lens.iter_mut().zip(rows) {
            *len += r.len();
        }
        let logits = out.logits.to_vec::<f32>()?;
        let voc = logits.len() / b;
        Ok(logits.chunks(voc).take(n).map(<[f32]>::to_vec).collect())
    }

    /// Row `row`'s sequence's cache, holding its tokens so far: a copy, or
    /// the sequence's own cache when it runs alone (then valid until the
    /// next step, which is given it).
    pub fn row_cache(&self, row: usize) -> Result<Cache> {
        let Some(&len) = self.lens.get(row) else {
            return Err(Error::Input(format!("no sequence in row {row}")));
        };
        if let Some(alone) = &self.alone {
            return Ok(Cache::new(alone.buffers.clone(), len));
        }
        let all = self
            .caches
            .clone()
            .ok_or_else(|| Error::Input("the batch holds no caches".into()))?;
        Ok(Cache::new(self.take.call_fn((all, self.index(row)?))?, len))
    }

    /// Ends row `row`'s sequence and frees its slot; the last row moves
    /// into its place (as `Vec::swap_remove` moves elements). An error
    /// empties the batch.
    pub fn remove(&mut self, row: usize) -> Result<()> {
        let res = self.try_remove(row);
        self.clear_on_error(res)
    }

    fn try_remove(&mut self, row: usize) -> Result<()> {
        let last = match self.lens.len().checked_sub(1) {
            Some(last) if row <= last => last,
            _ => return Err(Error::Input(format!("no sequence in row {row}"))),
        };
        if self.alone.take().is_some() {
            self.lens.clear();
            return Ok(());
        }
        if row != last {
            let all = self.take_caches()?;
            let (from, to) = (self.index(last)?, self.index(row)?);
            self.caches = Some(self.moves.call_fn((all, from, to))?);
        }
        self.lens.swap_remove(row);
        if let [len] = self.lens[..] {
            // The one left runs alone again, from its own cache; if that
            // fails, it ends, as after a failed step.
            let all = self.take_caches()?;
            let row = self
                .index(0)
                .and_then(|at| Ok(self.take.call_fn((all.clone(), at))?));
            self.caches = Some(all);
            self.alone = Some(Cache::new(row?, len));
        }
        Ok(())
    }
}

/// `shape` (a cache's, tagged `(b, k, h, hd)`) with `rows` rows.
fn with_rows(shape: Shape, rows: usize) -> Shape {
    let mut dims = shape.dims().to_vec();
    dims[0] = rows as i64;
    KvCache::shape(dims[0], dims[1], dims[2], dims[3], shape.dtype())
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
fn compile_rows<M: CausalLm>(
    platform: &Platform,
    model: &M,
    all: &[Shape],
    b: usize,
    s: usize,
) -> Result<RowsStep<M>> {
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
