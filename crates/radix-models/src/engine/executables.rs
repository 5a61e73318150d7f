//! The executables an [`Engine`](super::Engine) runs: per step
//! length, one program holding every layer ([`Plan::OneProgram`]) or an
//! embedding, a block per kind of layer and a head ([`Plan::PerBlock`],
//! [`LayerByLayer`], which the batch's steps run too), compiled or loaded
//! from the executable cache.

use radix::nn::KvCache;
use radix::{Bufferized, Compiled, DType, Module, Platform, Shape, Tensor};

use super::{Plan, in_place};
use crate::Result;
use crate::transformer::{Block, Decoder, Stacked, Step, StepWith};

/// The tokens of a step.
#[derive(Module, Clone, Copy, Debug)]
pub(crate) struct Tokens {
    /// Token ids `(b, s)`.
    pub ids: Tensor,
    /// Where they go in the caches: a position (rank-0 `i32`), or one per
    /// row `(b)`.
    pub start: Tensor,
    /// Whose logits to return: a position in `ids`, or one per row.
    pub last: Tensor,
}

/// What a step gives.
#[derive(Module, Clone, Debug)]
pub(crate) struct Stepped {
    /// The logits after `last`.
    pub logits: Tensor,
    /// The caches, a layer each, with the step's tokens written.
    pub caches: Vec<KvCache>,
}

/// One layer as an executable.
pub(super) type BlockExe = Compiled<Block, (Tensor, Tensor, Step), (Tensor, KvCache)>;

/// The executables of one step length.
#[expect(
    clippy::large_enum_variant,
    reason = "an engine holds a few, one per step length"
)]
pub(super) enum StepExe {
    /// The layers as loops over stacked weights ([`Stacked`]): the
    /// caches are one stacked cache.
    OneProgram(Compiled<Stacked, (Tokens, Vec<KvCache>), Stepped>),
    PerBlock(LayerByLayer),
}

/// A step as an embedding, one executable per kind of block (run once per
/// layer with that layer's weights and cache, donated) and a head: `2 +
/// layers` dispatches, but each program holds one layer, so it compiles,
/// loads and sits in memory at a thirtieth of a whole model's cost.
pub(crate) struct LayerByLayer {
    /// `(ids, start)` to the hidden states and their positions.
    embed: Compiled<Decoder, (Tensor, Tensor), (Tensor, Tensor)>,
    /// One per block key ([`Block::program_key`]), in the order the keys first
    /// occur.
    blocks: Vec<BlockExe>,
    /// Per layer, its executable's index in `blocks` (found once here, not
    /// by formatting every layer's key each step).
    of_layer: Vec<usize>,
    /// `(x, last)` to the logits.
    head: Compiled<Decoder, (Tensor, Tensor), Tensor>,
}

impl LayerByLayer {
    /// Compiles (or loads) the step over `tokens`, each layer writing into
    /// a cache of shape `cache`: `embed` and `head` say how the model's
    /// ends run (a sequence's, or rows' each at its own position).
    pub(crate) fn compile(
        platform: &Platform,
        model: &Decoder,
        Tokens { ids, start, last }: Tokens,
        cache: Shape,
        embed: fn(&Decoder, (Tensor, Tensor)) -> (Tensor, Tensor),
        head: fn(&Decoder, (Tensor, Tensor)) -> Tensor,
    ) -> Result<LayerByLayer> {
        let embed = radix::compile(platform, model, &(ids, start), embed)?;
        let [x, pos] = [0, 1].map(|i| Tensor::param(embed.program().results()[i].shape));
        let inputs = (
            x,
            pos,
            Step {
                cache: KvCache::param(cache),
                start,
                layer: None,
            },
        );
        let (mut keys, mut blocks, mut of_layer) = (vec![], vec![], vec![]);
        for b in model.blocks() {
            let key = b.program_key();
            let i = match keys.iter().position(|k| *k == key) {
                Some(i) => i,
                None => {
                    blocks.push(radix::compile(platform, b, &inputs, block_step)?);
                    keys.push(key);
                    keys.len() - 1
                }
            };
            of_layer.push(i);
        }
        let head = radix::compile(platform, model, &(x, last), head)?;
        Ok(LayerByLayer {
            embed,
            blocks,
            of_layer,
            head,
        })
    }

    /// Runs the step over `tokens` on the model's `weights` and `caches` (a
    /// layer each, donated).
    pub(crate) fn run(
        &self,
        weights: &Bufferized<Decoder>,
        TokensWith { ids, start, last }: Bufferized<Tokens>,
        caches: Bufferized<Vec<KvCache>>,
    ) -> Result<Bufferized<Stepped>> {
        let (mut x, pos) = self.embed.call(weights, (ids, start.clone()))?;
        let mut written = Vec::with_capacity(caches.len());
        let layers = Decoder::block_weights(weights);
        for ((weights, cache), &i) in layers.iter().zip(caches).zip(&self.of_layer) {
            let start = start.clone();
            let block = &self.blocks[i];
            let (y, cache) = block.call(
                weights,
                (
                    x,
                    pos.clone(),
                    StepWith {
                        cache,
                        start,
                        layer: None,
                    },
                ),
            )?;
            x = y;
            written.push(cache);
        }
        Ok(SteppedWith {
            logits: self.head.call(weights, (x, last))?,
            caches: written,
        })
    }
}

/// The executables of steps over `len` tokens as `plan` runs them, with
/// caches of `capacity` positions, compiled or loaded.
pub(super) fn step_exe(
    platform: &Platform,
    model: &Decoder,
    plan: Plan,
    capacity: usize,
    len: usize,
) -> Result<StepExe> {
    let exe = match plan {
        Plan::OneProgram => {
            let caches = cache_shapes(model, plan, capacity);
            let inputs = (
                step_inputs(len),
                caches.into_iter().map(KvCache::param).collect(),
            );
            let stacked = Stacked::new(model);
            StepExe::OneProgram(radix::compile(platform, &stacked, &inputs, looped_step)?)
        }
        Plan::PerBlock => StepExe::PerBlock(LayerByLayer::compile(
            platform,
            model,
            step_inputs(len),
            model.cache_shapes(capacity)[0],
            |m, (ids, start)| m.embed(ids, start),
            |m, (x, last)| m.head(x, last),
        )?),
    };
    Ok(exe)
}

/// The shapes of one sequence's caches as `plan`'s steps take them, of
/// `capacity` positions: a layer each, or one stack of every layer's.
pub(super) fn cache_shapes(model: &Decoder, plan: Plan, capacity: usize) -> Vec<Shape> {
    match plan {
        Plan::PerBlock => model.cache_shapes(capacity),
        Plan::OneProgram => vec![model.stacked_cache_shape(capacity)],
    }
}

/// A sequence's step of `len` tokens (placeholders).
pub(super) fn step_inputs(len: usize) -> Tokens {
    let ids = Tensor::param(Shape::tagged(DType::I32, &[("b", 1), ("s", len as i64)]));
    let scalar = Tensor::param(Shape::scalar(DType::I32));
    Tokens {
        ids,
        start: scalar,
        last: scalar,
    }
}

/// What a step of every layer written out takes: `len` tokens and the
/// caches, a layer each (placeholders).
pub(super) fn unrolled_inputs(
    model: &Decoder,
    len: usize,
    capacity: usize,
) -> (Tokens, Vec<KvCache>) {
    let caches = model.cache_shapes(capacity).into_iter().map(KvCache::param);
    (step_inputs(len), caches.collect())
}

/// The whole model as one step, every layer written out: the caches
/// passed in are written in place.
pub(super) fn unrolled_step(
    m: &Decoder,
    (Tokens { ids, start, last }, caches): (Tokens, Vec<KvCache>),
) -> Stepped {
    let (logits, new) = m.forward(ids, start, last, caches.clone());
    Stepped {
        logits,
        caches: new.into_iter().zip(caches).map(in_place).collect(),
    }
}

/// The whole model as one step, its layers loops ([`Stacked::forward`]):
/// the stacked cache passed in is written in place.
fn looped_step(
    m: &Stacked,
    (Tokens { ids, start, last }, caches): (Tokens, Vec<KvCache>),
) -> Stepped {
    let (logits, cache) = m.forward(ids, start, last, caches[0]);
    Stepped {
        logits,
        caches: vec![in_place((cache, caches[0]))],
    }
}

/// One layer as a step of its own: its cache is written in place.
fn block_step(b: &Block, (x, pos, step): (Tensor, Tensor, Step)) -> (Tensor, KvCache) {
    let (x, cache) = b.forward(x, pos, step);
    (x, in_place((cache, step.cache)))
}
