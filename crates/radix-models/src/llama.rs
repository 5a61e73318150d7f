//! LLaMA (Touvron et al. 2023, <https://arxiv.org/abs/2302.13971>): pre-norm
//! blocks of RMSNorm, grouped-query attention with rotary positions and a
//! SwiGLU MLP; upstream code: Hugging Face `transformers`
//! `models/llama/modeling_llama.py` and llama.cpp `src/models/llama.cpp`.
//! Rotary scaling (linear, Llama 3, YaRN) comes from the file.
//!
//! GGUF stores `attn_q`/`attn_k` with rows permuted for adjacent-pair rotary
//! embeddings; they are used as stored, with [`RopeLayout::AdjacentPair`]
//! (a Hugging Face folder keeps the half-split layout).
//!
//! [`Block`] is also the block of Mistral, Qwen2 and Qwen3, whose attention
//! differs only in what [`Attention`] takes from the configuration.
//!
//! [`RopeLayout::AdjacentPair`]: radix::nn::RopeLayout::AdjacentPair

use std::path::Path;

use radix::nn::{GatedMlp, KvCache, Linear, MatrixFormat, RmsNorm};
use radix::{Module, Platform, Tensor};

use crate::Result;
use crate::generate::{Generator, Step};
use crate::transformer::{Attention, Decoder, DecoderConfig, Layer};

/// The hyper-parameters (the shared decoder configuration).
pub type LlamaConfig = DecoderConfig;

/// The model: embedding, blocks, final norm and (unless tied) output.
pub type Llama = Decoder<Block>;

/// A SmolLM2-style model on a device, ready to generate.
pub type LlamaRunner = Generator<Llama>;

/// One pre-norm transformer block (`blk.N` in GGUF).
#[derive(Module, Clone, Debug)]
pub struct Block {
    attn_norm: RmsNorm,
    #[module(prefix = "")]
    attn: Attention,
    ffn_norm: RmsNorm,
    #[module(prefix = "ffn_")]
    mlp: GatedMlp,
}

impl Layer for Block {
    fn new(cfg: &DecoderConfig, layer: usize) -> Block {
        Block {
            attn_norm: cfg.norm(("d", cfg.dim)),
            attn: Attention::new(cfg, layer),
            ffn_norm: cfg.norm(("d", cfg.dim)),
            mlp: GatedMlp::new(("d", cfg.dim), cfg.ffn_dim),
        }
    }

    /// `x + attn(norm(x))`, then `+ mlp(norm(.))`.
    fn forward(&self, x: Tensor, pos: Tensor, step: Step) -> (Tensor, KvCache) {
        let (a, cache) = self.attn.forward(self.attn_norm.forward(x), pos, step);
        let x = x + a;
        let x = x + self.mlp.forward(self.ffn_norm.forward(x));
        (x, cache)
    }

    fn kind(&self) -> u64 {
        self.attn.is_sliding().into()
    }

    fn linears_mut(&mut self) -> Vec<(&'static str, &mut Linear)> {
        crate::transformer::gated_block_linears(&mut self.attn, &mut self.mlp)
    }
}

impl Llama {
    /// Opens the GGUF file at `path` and loads the model on `platform`, its
    /// matrices as `matrices` asks, into a runner whose cache holds
    /// `capacity` positions.
    pub fn open(
        platform: &Platform,
        path: &Path,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<LlamaRunner> {
        Llama::load(platform, radix::io::Gguf::open(path)?, capacity, matrices)
    }

    /// Loads the model in `gguf` on `platform`, its matrices as `matrices`
    /// asks, into a runner whose cache holds `capacity` positions.
    pub fn load(
        platform: &Platform,
        gguf: radix::io::Gguf,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<LlamaRunner> {
        let model = Llama::new(&DecoderConfig::from_gguf(&gguf)?);
        Generator::from_gguf(platform, model, gguf, capacity, matrices)
    }
}
