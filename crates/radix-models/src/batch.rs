//! Continuous batching: every running sequence decodes in one step.
//!
//! A [`Batch`] holds one key/value cache per layer with a row per slot
//! (`(slots, capacity, h, hd)`), beside a [`Generator`] that owns the
//! weights and prefills prompts. A prompt is prefilled alone (the
//! generator's prefill executables) and its cache copied into the first
//! free row; a decode step then runs the first `n` rows, padded up to a
//! compiled batch size (a bucket), each row at its own position. A finished
//! sequence leaves at once: the last row moves into its place, so the
//! running rows are always `0..n` and a step never computes more rows than
//! its bucket.
//!
//! The steps take the caches and donate them, as the generator's do: a
//! step writes in place.

use std::collections::HashMap;

use radix::nn::KvCache;
use radix::{Buffer, Bufferized, Compiled, DType, Shape, Tensor};

use crate::generate::{Cache, CausalLm, Generator, Step};
use crate::{Error, Result};

/// Token ids `(b, 1)`, each row's position `(b)`, the caches of every slot.
type DecodeInputs = (Tensor, Tensor, Vec<KvCache>);

/// Sequences decoding together, one cache row (slot) each.
pub struct Batch<M: CausalLm> {
    slots: usize,
    capacity: usize,
    /// Decode batch sizes, ascending; the last is `slots`.
    buckets: Vec<usize>,
    decode: HashMap<usize, Compiled<M, DecodeInputs, (Tensor, Vec<KvCache>)>>,
    /// Copies a one-sequence cache into a row.
    insert: Compiled<(), (Vec<KvCache>, Vec<KvCache>, Tensor), Vec<KvCache>>,
    /// Copies a row into another.
    copy: Compiled<(), (Vec<KvCache>, Tensor, Tensor), Vec<KvCache>>,
    /// Makes empty caches.
    zeros: Compiled<(), (), Vec<KvCache>>,
    /// `None` only after a failed step lost them (made anew once every
    /// sequence has left).
    caches: Option<Bufferized<Vec<KvCache>>>,
    /// Per running row, the positions holding tokens.
    lens: Vec<usize>,
}

impl<M: CausalLm> Batch<M> {
    /// Up to `slots` sequences of `generator`'s model with caches of its
    /// capacity; compiles (or loads from the executable cache) the decode
    /// step of every bucket: powers of two below `slots`, and `slots`.
    pub fn new(generator: &Generator<M>, slots: usize) -> Result<Batch<M>> {
        if slots == 0 {
            return Err(Error::Input("a batch of 0 slots".into()));
        }
        let (platform, model, capacity) = (
            generator.platform(),
            generator.model(),
            generator.capacity(),
        );
        let shapes: Vec<Shape> = model
            .cache_shapes(capacity)
            .into_iter()
            .map(|s| with_rows(s, slots))
            .collect::<Result<_>>()?;
        let mut buckets: Vec<usize> = std::iter::successors(Some(1), |b| Some(b * 2))
            .take_while(|&b| b < slots)
            .collect();
        buckets.push(slots);
        let mut decode = HashMap::new();
        let full: Vec<KvCache> = shapes.iter().map(|&s| KvCache::param(s)).collect();
        for &b in &buckets {
            let ids = Tensor::param(Shape::tagged(DType::I32, &[("b", b as i64), ("s", 1)]));
            let starts = Tensor::param(Shape::tagged(DType::I32, &[("b", b as i64)]));
            let exe = radix::compile(platform, model, &(ids, starts, full.clone()), decode_step)?;
            decode.insert(b, exe);
        }
        let one: Vec<KvCache> = model
            .cache_shapes(capacity)
            .into_iter()
            .map(KvCache::param)
            .collect();
        let row = Tensor::param(Shape::scalar(DType::I32));
        let insert = radix::compile_fn(platform, &(full.clone(), one, row), |(full, one, row)| {
            let at = |t: Tensor| row_start(row, t);
            full.iter()
                .zip(one)
                .map(|(f, o)| KvCache {
                    k: f.k.dynamic_update_slice(o.k, &at(f.k)).reuse_buffer(f.k),
                    v: f.v.dynamic_update_slice(o.v, &at(f.v)).reuse_buffer(f.v),
                })
                .collect()
        })?;
        let copy = radix::compile_fn(platform, &(full, row, row), |(full, from, to)| {
            let moved = |t: Tensor| {
                let mut sizes = t.shape().dims().to_vec();
                sizes[0] = 1;
                let src = t.dynamic_slice(&row_start(from, t), &sizes);
                t.dynamic_update_slice(src, &row_start(to, t))
                    .reuse_buffer(t)
            };
            full.iter()
                .map(|f| KvCache {
                    k: moved(f.k),
                    v: moved(f.v),
                })
                .collect()
        })?;
        let zeros = radix::compile_fn(platform, &(), |()| {
            shapes
                .iter()
                .map(|&s| KvCache::zeros(s))
                .collect::<Vec<_>>()
        })?;
        Ok(Batch {
            slots,
            capacity,
            buckets,
            decode,
            insert,
            copy,
            caches: Some(zeros.call_fn(())?),
            zeros,
            lens: vec![],
        })
    }

    /// The compiled decode batch sizes, ascending.
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

    fn caches(&mut self) -> Result<Bufferized<Vec<KvCache>>> {
        match self.caches.take() {
            Some(c) => Ok(c),
            None if self.lens.is_empty() => Ok(self.zeros.call_fn(())?),
            None => Err(Error::Input(
                "the batch's caches were lost by a failed step: remove its sequences".into(),
            )),
        }
    }

    /// Takes the prefilled `cache` of a sequence (from
    /// [`Generator::prefill`] of `generator`) into the next row: that row's index.
    pub fn insert(&mut self, generator: &Generator<M>, cache: Cache) -> Result<usize> {
        if self.is_full() {
            return Err(Error::Input(format!("all {} slots are taken", self.slots)));
        }
        let row = self.lens.len();
        let (len, buffers) = (cache.len(), cache.buffers);
        let full = self.caches()?;
        let at = scalar(generator, row)?;
        self.caches = Some(self.insert.call_fn((full, buffers, at))?);
        self.lens.push(len);
        Ok(row)
    }

    /// Appends `tokens[i]` to row `i`'s sequence, for every running row,
    /// in one step: the logits after each.
    pub fn step(&mut self, generator: &Generator<M>, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let n = self.lens.len();
        if tokens.len() != n || n == 0 {
            return Err(Error::Input(format!(
                "{} tokens for {n} running sequences",
                tokens.len()
            )));
        }
        if let Some(i) = self.lens.iter().position(|&l| l >= self.capacity) {
            return Err(Error::Input(format!(
                "the cache of row {i} ({} positions) is full",
                self.capacity
            )));
        }
        let b = self
            .buckets
            .iter()
            .copied()
            .find(|&b| b >= n)
            .unwrap_or(self.slots);
        // Padding rows decode token 0 at their row's current position: rows
        // past `n` hold no sequence, and an insert overwrites them whole.
        let mut ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        ids.resize(b, 0);
        let mut starts: Vec<i32> = self.lens.iter().map(|&l| l as i32).collect();
        starts.resize(b, 0);
        let platform = generator.platform();
        let ids = Buffer::from_slice(
            platform,
            &ids,
            Shape::tagged(DType::I32, &[("b", b as i64), ("s", 1)]),
        )?;
        let starts = Buffer::from_slice(
            platform,
            &starts,
            Shape::tagged(DType::I32, &[("b", b as i64)]),
        )?;
        let full = self.caches()?;
        let (logits, caches) = self.decode[&b].call(generator.weights(), (ids, starts, full))?;
        self.caches = Some(caches);
        for l in &mut self.lens {
            *l += 1;
        }
        let logits = logits.to_vec::<f32>()?;
        let voc = logits.len() / b;
        Ok(logits.chunks(voc).take(n).map(<[f32]>::to_vec).collect())
    }

    /// Ends row `row`'s sequence; the last row moves into its place (as
    /// `Vec::swap_remove` moves elements).
    pub fn remove(&mut self, generator: &Generator<M>, row: usize) -> Result<()> {
        let last = self
            .lens
            .len()
            .checked_sub(1)
            .filter(|&last| row <= last)
            .ok_or_else(|| Error::Input(format!("no sequence in row {row}")))?;
        if row != last {
            let full = self.caches()?;
            let (from, to) = (scalar(generator, last)?, scalar(generator, row)?);
            self.caches = Some(self.copy.call_fn((full, from, to))?);
        }
        self.lens.swap_remove(row);
        Ok(())
    }
}

/// One decode step over the first `b` rows of every layer's cache: logits
/// `(b, voc)` and the caches with each row's token written at its position.
fn decode_step<M: CausalLm>(
    model: &M,
    (ids, starts, full): DecodeInputs,
) -> (Tensor, Vec<KvCache>) {
    let b = ids.dim("b");
    let (mut x, pos) = model.embed_rows(ids, starts);
    let mut written = Vec::with_capacity(full.len());
    for (block, cache) in model.blocks().iter().zip(&full) {
        let rows = KvCache {
            k: cache.k.slice("b", 0..b),
            v: cache.v.slice("b", 0..b),
        };
        let step = Step {
            cache: rows,
            start: starts,
        };
        let (y, rows) = radix::call(
            |(bl, x, pos, step)| M::block(bl, *x, *pos, *step),
            &(block.clone(), x, pos, step),
        );
        x = y;
        // The `b` rows written, then the others as they were.
        let back = |full: Tensor, rows: Tensor| {
            let n = full.dim("b");
            let all = if n > b {
                Tensor::concatenate(&[rows, full.slice("b", b..n)], "b")
            } else {
                rows
            };
            all.reuse_buffer(full)
        };
        written.push(KvCache {
            k: back(cache.k, rows.k),
            v: back(cache.v, rows.v),
        });
    }
    (model.head(x, Tensor::scalar(0.0, DType::I32)), written)
}

/// The start of row `row` of `t`: `[row, 0, 0, ...]`.
fn row_start(row: Tensor, t: Tensor) -> Vec<Tensor> {
    let zero = Tensor::scalar(0.0, DType::I32);
    let mut at = vec![zero; t.shape().rank()];
    at[0] = row;
    at
}

/// `shape` (a one-sequence cache, batch axis first) with `rows` rows.
fn with_rows(shape: Shape, rows: usize) -> Result<Shape> {
    shape
        .remove_axis("b")
        .and_then(|s| s.insert_axis(0, rows as i64, "b"))
        .ok_or_else(|| Error::Input(format!("a cache shape without a batch axis: {shape:?}")))
}

fn scalar<M: CausalLm>(generator: &Generator<M>, v: usize) -> Result<Buffer> {
    Ok(Buffer::from_slice(
        generator.platform(),
        &[v as i32],
        Shape::scalar(DType::I32),
    )?)
}
