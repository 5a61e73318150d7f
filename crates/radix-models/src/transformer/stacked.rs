//! The decoder with its layers as loops: [`Plan::OneProgram`]'s model.
//!
//! A program of every layer written out holds one copy of the block's
//! kernels per layer, and loading it from the executable cache took as
//! long as a tenth of compiling it (XLA's runtime links each kernel).
//! Here consecutive layers of one kind ([`Block::program_key`]) are a run
//! whose weights are stacked along a leading `layer` axis, and a program
//! runs each run as one `for_` body over layer `i`: SmolLM2's 30 layers
//! are one body, so the program holds one block's kernels. The matrices
//! and the cache are read in place: the custom calls take the stacks and
//! `i` ([`Tensor::layer`]), and the keys and values are written into one
//! cache of every layer ([`KvCache::write_layer`]).
//!
//! [`Plan::OneProgram`]: crate::engine::Plan::OneProgram

use std::ops::Range;

use radix::nn::KvCache;
use radix::nn::tags::LAYER;
use radix::{Bufferized, DType, Module, Platform, Tensor};

use super::{Block, Decoder, Step};
use crate::Result;

/// A decoder whose layers are runs of one kind, each run's weights
/// stacked (see the module doc).
#[derive(Module, Clone, Debug)]
pub struct Stacked {
    /// The embedding, the final norm and the head: the decoder without
    /// its blocks.
    ends: Decoder,
    /// Per run, its blocks' weights, each with a leading `layer` axis (a
    /// run of one layer: that layer's own).
    runs: Vec<Block>,
    /// Per run, its layers.
    #[module(skip)]
    layers: Vec<Range<usize>>,
}

impl Stacked {
    /// `model` with its layers stacked in runs (placeholders).
    pub fn new(model: &Decoder) -> Stacked {
        let layers = runs(model.blocks());
        let runs = layers
            .iter()
            .map(|r| {
                let mut b = model.blocks()[r.start].clone();
                if r.len() == 1 {
                    // A layer alone runs as it is, on its own weights.
                    return b;
                }
                b.visit_mut(&mut String::new(), &mut |_, t| {
                    let s = t.shape();
                    *t = Tensor::param(s.insert_axis(0, r.len() as i64, LAYER).unwrap_or(s));
                });
                b
            })
            .collect();
        Stacked {
            ends: model.without_blocks(),
            runs,
            layers,
        }
    }

    /// The layers of each run, in order.
    pub fn runs(&self) -> &[Range<usize>] {
        &self.layers
    }

    /// `model`'s `weights` on `platform` as this stack holds them: each
    /// run's stacked by a program of its own (the blocks' buffers are
    /// read, not taken; the embedding's and the head's, and those of a
    /// layer that runs alone, are shared).
    pub fn stack_weights(
        &self,
        platform: &Platform,
        model: &Decoder,
        weights: &Bufferized<Decoder>,
    ) -> Result<Bufferized<Stacked>> {
        let mut runs = Vec::with_capacity(self.layers.len());
        for r in &self.layers {
            if r.len() == 1 {
                runs.push(weights.layers[r.start].clone());
                continue;
            }
            let blocks: Vec<Block> = model.blocks()[r.clone()].to_vec();
            let exe = radix::compile_fn(platform, &blocks, |bs: Vec<Block>| stack(&bs))?;
            runs.push(exe.call(&(), weights.layers[r.clone()].to_vec())?);
        }
        Ok(StackedWith {
            ends: Decoder::ends_of(weights),
            runs,
            layers: self.layers.clone(),
        })
    }

    /// [`Decoder::forward`] with every layer's keys and values in `cache`
    /// (stacked, [`Decoder::stacked_cache_shape`]): logits at `last` and the cache
    /// with the tokens written.
    pub fn forward(
        &self,
        ids: Tensor,
        start: Tensor,
        last: Tensor,
        cache: KvCache,
    ) -> (Tensor, KvCache) {
        let (mut x, pos) = self.ends.embed(ids, start);
        let mut cache = cache;
        for (block, r) in self.runs.iter().zip(&self.layers) {
            if r.len() == 1 {
                let step = Step {
                    cache,
                    start,
                    layer: Some(Tensor::scalar(r.start as f64, DType::I32)),
                };
                (x, cache) = block.forward(x, pos, step);
                continue;
            }
            let first = r.start as f64;
            let (state, _) = radix::for_(r.len() as i64, LAYER, &[x, cache.k, cache.v], |i, s| {
                let layer = block.layer(i);
                let step = Step {
                    cache: KvCache { k: s[1], v: s[2] },
                    start,
                    layer: Some(i + first),
                };
                let (y, c) = layer.forward(s[0], pos, step);
                (vec![y, c.k, c.v], vec![])
            });
            x = state[0];
            cache = KvCache {
                k: state[1],
                v: state[2],
            };
        }
        (self.ends.head(x, last), cache)
    }
}

impl Block {
    /// Layer `i` (a rank-0 integer) of a block of stacked weights: each
    /// weight's entry `i`, which a kernel reads in place
    /// ([`Tensor::layer`]).
    fn layer(&self, i: Tensor) -> Block {
        let mut b = self.clone();
        b.visit_mut(&mut String::new(), &mut |_, t| *t = t.layer(i));
        b
    }
}

/// The blocks `bs` (of one key) as one block whose weights are theirs
/// stacked along a leading `layer` axis.
fn stack(bs: &[Block]) -> Block {
    let leaves: Vec<Vec<(String, Tensor)>> = bs.iter().map(radix::module::tensors).collect();
    let mut out = bs[0].clone();
    let mut at = 0;
    out.visit_mut(&mut String::new(), &mut |_, t| {
        let parts: Vec<Tensor> = leaves.iter().map(|l| l[at].1.unsqueeze(0, LAYER)).collect();
        *t = Tensor::concatenate(&parts, LAYER);
        at += 1;
    });
    out
}

/// The layers of `blocks` in runs of one [`Block::program_key`], in order;
/// a layer whose matrices a loop would copy ([`read_in_place`]) is a run
/// of its own.
fn runs(blocks: &[Block]) -> Vec<Range<usize>> {
    let keys: Vec<String> = blocks.iter().map(Block::program_key).collect();
    let mut runs: Vec<Range<usize>> = vec![];
    for (i, key) in keys.iter().enumerate() {
        match runs.last_mut() {
            Some(r) if keys[r.start] == *key && read_in_place(&blocks[i]) => r.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    runs
}

/// Whether a loop body reads each of `block`'s matrices where it lies in
/// the stack: a matrix in blocks is read by a kernel, which takes the
/// stack ([`Tensor::layer`]), but one that XLA multiplies itself (f32 or
/// bf16 matrices, an adapter's) would be copied out of the stack at every
/// step (a whole layer's f32 matrices: SmolLM2 decoded at 19 tokens/s
/// against 30 per block). Such a layer runs alone: a loop of one
/// iteration, which XLA writes out.
fn read_in_place(block: &Block) -> bool {
    radix::module::tensors(block).iter().all(|(_, t)| {
        let s = t.shape();
        s.rank() < 2 || radix::quant::blocks_format(&s).is_some()
    })
}
