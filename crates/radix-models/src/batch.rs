//! Continuous batching: every running sequence decodes in one step.
//!
//! A [`Batch`] runs up to `slots` sequences beside a [`Generator`] that owns
//! the weights and prefills prompts. Each sequence keeps the cache its
//! prefill made (one `(1, capacity, h, hd)` pair per layer): joining the
//! batch moves no data, and leaving it frees the cache at once. A decode
//! step takes the running sequences' caches, padded with spare ones up to a
//! compiled batch size (a bucket), joins them along the batch axis for
//! attention, writes each row's token at its own position and hands every
//! row's cache back in the buffer it came in (donated, written in place).

use std::collections::HashMap;

use radix::nn::KvCache;
use radix::{Buffer, Bufferized, Compiled, DType, Shape, Tensor};

use crate::generate::{Cache, CausalLm, Generator, Step};
use crate::{Error, Result};

/// One sequence's caches: one pair per layer.
type Row = Vec<KvCache>;
/// Token ids `(b, 1)`, each row's position `(b)`, each row's caches.
type DecodeInputs = (Tensor, Tensor, Vec<Row>);
/// The decode step of one bucket: logits and each row's caches.
type Decode<M> = Compiled<M, DecodeInputs, (Tensor, Vec<Row>)>;

/// Sequences decoding together.
pub struct Batch<M: CausalLm> {
    slots: usize,
    capacity: usize,
    /// Decode batch sizes, ascending; the last is `slots`.
    buckets: Vec<usize>,
    decode: HashMap<usize, Decode<M>>,
    /// Makes one row's empty caches (spares that pad a step).
    zeros: Compiled<(), (), Row>,
    /// Per running row: its caches and how many positions hold tokens.
    rows: Vec<(Bufferized<Row>, usize)>,
    /// Caches that pad a step to its bucket; what they hold is never read.
    spares: Vec<Bufferized<Row>>,
}

impl<M: CausalLm> Batch<M> {
    /// Up to `slots` sequences of `generator`'s model with caches of its
    /// capacity; compiles (or loads from the executable cache) the decode
    /// step of every bucket: powers of two below `slots`, and `slots`.
    pub fn new(generator: &Generator<M>, slots: usize) -> Result<Batch<M>> {
        if slots == 0 {
            return Err(Error::Input("a batch of 0 slots".into()));
        }
        let (platform, model) = (generator.platform(), generator.model());
        let capacity = generator.capacity();
        let shapes = model.cache_shapes(capacity);
        let row: Row = shapes.iter().map(|&s| KvCache::param(s)).collect();
        let mut buckets: Vec<usize> = std::iter::successors(Some(1), |b| Some(b * 2))
            .take_while(|&b| b < slots)
            .collect();
        buckets.push(slots);
        let mut decode = HashMap::new();
        for &b in &buckets {
            let ids = Tensor::param(Shape::tagged(DType::I32, &[("b", b as i64), ("s", 1)]));
            let starts = Tensor::param(Shape::tagged(DType::I32, &[("b", b as i64)]));
            let inputs = (ids, starts, vec![row.clone(); b]);
            decode.insert(b, radix::compile(platform, model, &inputs, decode_step)?);
        }
        let zeros = radix::compile_fn(platform, &(), |()| {
            shapes.iter().map(|&s| KvCache::zeros(s)).collect::<Row>()
        })?;
        Ok(Batch {
            slots,
            capacity,
            buckets,
            decode,
            zeros,
            rows: vec![],
            spares: vec![],
        })
    }

    /// The compiled decode batch sizes, ascending.
    pub fn buckets(&self) -> &[usize] {
        &self.buckets
    }

    /// How many sequences run.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no sequence runs.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Whether every slot is taken.
    pub fn is_full(&self) -> bool {
        self.rows.len() == self.slots
    }

    /// Takes a sequence prefilled by [`Generator::prefill`] (its `cache`)
    /// into the next row: that row's index.
    pub fn insert(&mut self, cache: Cache) -> Result<usize> {
        if self.is_full() {
            return Err(Error::Input(format!("all {} slots are taken", self.slots)));
        }
        let len = cache.len();
        self.rows.push((cache.buffers, len));
        Ok(self.rows.len() - 1)
    }

    /// Appends `tokens[i]` to row `i`'s sequence, for every running row,
    /// in one step: the logits after each. A failed step ends every
    /// sequence (their caches were given to it).
    pub fn step(&mut self, generator: &Generator<M>, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let n = self.rows.len();
        if tokens.len() != n || n == 0 {
            return Err(Error::Input(format!(
                "{} tokens for {n} running sequences",
                tokens.len()
            )));
        }
        if let Some(i) = self.rows.iter().position(|r| r.1 >= self.capacity) {
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
        // Padding rows decode token 0 at position 0 of a spare cache.
        let mut ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        ids.resize(b, 0);
        let mut starts: Vec<i32> = self.rows.iter().map(|r| r.1 as i32).collect();
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
        while self.spares.len() < b - n {
            self.spares.push(self.zeros.call_fn(())?);
        }
        let lens: Vec<usize> = self.rows.iter().map(|r| r.1 + 1).collect();
        let mut caches: Vec<Bufferized<Row>> = self.rows.drain(..).map(|r| r.0).collect();
        caches.extend(self.spares.drain(..b - n));
        let (logits, mut caches) =
            self.decode[&b].call(generator.weights(), (ids, starts, caches))?;
        self.spares.extend(caches.drain(n..));
        self.rows = caches.into_iter().zip(lens).collect();
        let logits = logits.to_vec::<f32>()?;
        let voc = logits.len() / b;
        Ok(logits.chunks(voc).take(n).map(<[f32]>::to_vec).collect())
    }

    /// Ends row `row`'s sequence and frees its cache; the last row moves
    /// into its place (as `Vec::swap_remove` moves elements).
    pub fn remove(&mut self, row: usize) -> Result<()> {
        if row >= self.rows.len() {
            return Err(Error::Input(format!("no sequence in row {row}")));
        }
        self.rows.swap_remove(row);
        Ok(())
    }
}

/// One decode step over `b` rows: logits `(b, voc)` and each row's caches
/// with its token written at its position, in the row's own buffers.
fn decode_step<M: CausalLm>(model: &M, (ids, starts, rows): DecodeInputs) -> (Tensor, Vec<Row>) {
    let (mut x, pos) = model.embed_rows(ids, starts);
    let mut written: Vec<Row> = vec![vec![]; rows.len()];
    for (layer, block) in model.blocks().iter().enumerate() {
        let join = |part: fn(&KvCache) -> Tensor| {
            let parts: Vec<Tensor> = rows.iter().map(|r| part(&r[layer])).collect();
            match parts.as_slice() {
                [one] => *one,
                _ => Tensor::concatenate(&parts, "b"),
            }
        };
        let step = Step {
            cache: KvCache {
                k: join(|c| c.k),
                v: join(|c| c.v),
            },
            start: starts,
        };
        let (y, cache) = radix::call(
            |(bl, x, pos, step)| M::block(bl, *x, *pos, *step),
            &(block.clone(), x, pos, step),
        );
        x = y;
        for (i, (row, out)) in rows.iter().zip(&mut written).enumerate() {
            let (old, i) = (row[layer], i as i64);
            out.push(KvCache {
                k: cache.k.slice("b", i..i + 1).reuse_buffer(old.k),
                v: cache.v.slice("b", i..i + 1).reuse_buffer(old.v),
            });
        }
    }
    (model.head(x, Tensor::scalar(0.0, DType::I32)), written)
}
