//! The executables a [`Generator`](super::Generator) runs: per step
//! length, one program holding every layer ([`Plan::OneProgram`]) or an
//! embedding, a block per kind of layer and a head ([`Plan::PerBlock`]),
//! compiled or loaded from the executable cache.

use radix::nn::KvCache;
use radix::{Compiled, DType, Platform, Shape, Tensor};

use super::{CausalLm, Plan, Step, forward, in_place};
use crate::Result;

/// Token ids `(b, s)`, the first position and the position whose logits to
/// return.
pub(super) type StepInputs = (Tensor, Tensor, Tensor);
/// The logits and the caches.
pub(super) type StepOutputs = (Tensor, Vec<KvCache>);

/// One layer as an executable.
pub(super) type BlockExe<M> =
    Compiled<<M as CausalLm>::Block, (Tensor, Tensor, Step), (Tensor, KvCache)>;

/// The executables of one step length.
#[expect(
    clippy::large_enum_variant,
    reason = "a generator holds a few, one per step length"
)]
pub(super) enum StepExe<M: CausalLm> {
    OneProgram(Compiled<M, (StepInputs, Vec<KvCache>), StepOutputs>),
    PerBlock {
        embed: Compiled<M, (Tensor, Tensor), (Tensor, Tensor)>,
        /// By block key ([`block_key`]), in the order the keys first occur.
        blocks: Vec<(String, BlockExe<M>)>,
        head: Compiled<M, (Tensor, Tensor), Tensor>,
    },
}

/// The executable that makes a prefill's empty caches of `capacity`
/// positions, compiled or loaded.
pub(super) fn empty_caches_exe<M: CausalLm>(
    platform: &Platform,
    model: &M,
    capacity: usize,
) -> Result<Compiled<(), (), Vec<KvCache>>> {
    let shapes = model.cache_shapes(capacity);
    let no_inputs = ();
    Ok(radix::compile_fn(platform, &no_inputs, |()| {
        empty_caches(&shapes)
    })?)
}

/// The executables of steps over `len` tokens as `plan` runs them, with
/// caches of `capacity` positions, compiled or loaded.
pub(super) fn step_exe<M: CausalLm>(
    platform: &Platform,
    model: &M,
    plan: Plan,
    capacity: usize,
    len: usize,
) -> Result<StepExe<M>> {
    let exe = match plan {
        Plan::OneProgram => {
            let inputs = one_program_inputs(model, len, capacity);
            StepExe::OneProgram(radix::compile(platform, model, &inputs, one_program_step)?)
        }
        Plan::PerBlock => {
            let (ids, start, last) = step_inputs(len);
            let embed = radix::compile(platform, model, &(ids, start), |m, (ids, start)| {
                m.embed(ids, start)
            })?;
            let [x, pos] = [0, 1].map(|i| Tensor::param(embed.program().results()[i].shape));
            let cache = KvCache::param(model.cache_shapes(capacity)[0]);
            let inputs = (x, pos, Step { cache, start });
            let mut blocks: Vec<(String, BlockExe<M>)> = vec![];
            for b in model.blocks() {
                let key = block_key::<M>(b);
                if !blocks.iter().any(|(k, _)| *k == key) {
                    let exe = radix::compile(platform, b, &inputs, block_step::<M>)?;
                    blocks.push((key, exe));
                }
            }
            let head = radix::compile(platform, model, &(x, last), |m, (x, last)| m.head(x, last))?;
            StepExe::PerBlock {
                embed,
                blocks,
                head,
            }
        }
    };
    Ok(exe)
}

pub(super) fn step_inputs(len: usize) -> StepInputs {
    let ids = Tensor::param(Shape::tagged(DType::I32, &[("b", 1), ("s", len as i64)]));
    let scalar = Tensor::param(Shape::scalar(DType::I32));
    (ids, scalar, scalar)
}

/// What a step takes: `len` tokens and the caches (placeholders).
pub(super) fn one_program_inputs<M: CausalLm>(
    model: &M,
    len: usize,
    capacity: usize,
) -> (StepInputs, Vec<KvCache>) {
    let caches = model.cache_shapes(capacity).into_iter().map(KvCache::param);
    (step_inputs(len), caches.collect())
}

/// The whole model as one step: the caches passed in are written in place.
pub(super) fn one_program_step<M: CausalLm>(
    m: &M,
    ((ids, start, last), caches): (StepInputs, Vec<KvCache>),
) -> StepOutputs {
    let (logits, new) = forward(m, ids, start, last, caches.clone());
    (logits, new.into_iter().zip(caches).map(in_place).collect())
}

/// One layer as a step of its own: its cache is written in place.
pub(super) fn block_step<M: CausalLm>(
    b: &M::Block,
    (x, pos, step): (Tensor, Tensor, Step),
) -> (Tensor, KvCache) {
    let (x, cache) = M::block(b, x, pos, step);
    (x, in_place((cache, step.cache)))
}

/// What decides a block's program: its kind and its weights' shapes (a
/// quantized file may store one layer's matrix in another block format).
pub(super) fn block_key<M: CausalLm>(block: &M::Block) -> String {
    let shapes: Vec<_> = radix::module::tensors(block)
        .into_iter()
        .map(|(_, t)| t.shape())
        .collect();
    format!("{} {shapes:?}", M::block_kind(block))
}

/// Empty caches, made inside the program.
pub(super) fn empty_caches(shapes: &[Shape]) -> Vec<KvCache> {
    shapes.iter().map(|&s| KvCache::zeros(s)).collect()
}
