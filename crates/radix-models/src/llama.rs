//! Llama decoder (SmolLM2-135M-Instruct), read from a llama.cpp GGUF file.
//!
//! The architecture is LLaMA (Touvron et al. 2023, <https://arxiv.org/abs/2302.13971>):
//! pre-norm blocks of RMSNorm, grouped-query attention with rotary positions
//! and a SwiGLU MLP; upstream code: Hugging Face `transformers`
//! `models/llama/modeling_llama.py` and llama.cpp `src/llama-model.cpp`.
//! GGUF stores `attn_q`/`attn_k` with rows permuted for adjacent-pair rotary
//! embeddings; they are used as stored, with [`RopeLayout::AdjacentPair`].
//!
//! [`Llama`] is the model, its fields named for its GGUF weights; running it
//! is [`crate::generate::Generator`]'s business ([`LlamaRunner`]); reading a
//! GGUF file's configuration and loading it is `llama/gguf.rs`'s.
//!
//! Axes: `b` batch, `s` sequence, `d` model width, `h` heads, `hd` head width,
//! `ff` MLP width, `voc` vocabulary; inside attention `s` becomes `q` (queries)
//! or `k` (keys).

use radix::nn::{self, Embedding, GatedMlp, KvCache, Linear, RmsNorm, RopeLayout, Rotary};
use radix::{Bufferized, DType, Module, Shape, Size, Tensor};

mod gguf;

use crate::generate::{CausalLm, Generator, Step};

/// The hyper-parameters, from the GGUF `llama.*` metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Transformer blocks (`llama.block_count`).
    pub n_layers: usize,
    /// Model width (`llama.embedding_length`).
    pub dim: i64,
    /// Query heads (`llama.attention.head_count`).
    pub n_heads: i64,
    /// Key/value heads (`llama.attention.head_count_kv`).
    pub n_kv_heads: i64,
    /// MLP width (`llama.feed_forward_length`).
    pub ffn_dim: i64,
    /// Vocabulary size (rows of `token_embd.weight`).
    pub vocab: i64,
    /// Rotary base (`llama.rope.freq_base`).
    pub rope_theta: f64,
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f64,
    /// Whether the output projection is the embedding table (no `output.weight`).
    pub tied_embeddings: bool,
}

impl LlamaConfig {
    /// The width of one head.
    pub fn head_dim(&self) -> i64 {
        self.dim / self.n_heads
    }
}

/// Self-attention of one block (`blk.N.attn_q`, ... in GGUF).
#[derive(Module, Clone, Debug)]
pub struct Attention {
    #[module(rename = "attn_q")]
    q: Linear,
    #[module(rename = "attn_k")]
    k: Linear,
    #[module(rename = "attn_v")]
    v: Linear,
    #[module(rename = "attn_output")]
    o: Linear,
    n_heads: i64,
    n_kv_heads: i64,
    rope: Rotary,
}

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

/// The model: embedding, blocks, final norm and (unless tied) output projection.
#[derive(Module, Clone, Debug)]
pub struct Llama {
    #[module(rename = "token_embd")]
    embed: Embedding,
    #[module(rename = "blk")]
    layers: Vec<Block>,
    #[module(rename = "output_norm")]
    norm: RmsNorm,
    output: Option<Linear>,
    #[module(skip)]
    cfg: LlamaConfig,
}

impl Attention {
    /// The projections of a block.
    pub fn new(cfg: &LlamaConfig) -> Attention {
        let (d, hd) = (cfg.dim, cfg.head_dim());
        Attention {
            q: Linear::new(("d", d), ("d", cfg.n_heads * hd)),
            k: Linear::new(("d", d), ("d", cfg.n_kv_heads * hd)),
            v: Linear::new(("d", d), ("d", cfg.n_kv_heads * hd)),
            o: Linear::new(("d", cfg.n_heads * hd), ("d", d)),
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            rope: Rotary::new(hd, cfg.rope_theta, RopeLayout::AdjacentPair),
        }
    }

    /// `x` `(b, s, d)` at positions `pos` `(b, s)`: writes its keys and values
    /// into the layer's cache from position `start` and attends over it,
    /// hiding keys after each query's position.
    pub fn forward(&self, x: Tensor, pos: Tensor, step: Step) -> (Tensor, KvCache) {
        let heads = |l: &Linear, n: i64| {
            l.forward(x)
                .split_axis("d", &[("h", n.into()), ("hd", Size::Auto)])
        };
        let q = self.rope.forward(heads(&self.q, self.n_heads), pos);
        let k = self.rope.forward(heads(&self.k, self.n_kv_heads), pos);
        let v = heads(&self.v, self.n_kv_heads);
        let (k, v) = (k.rename("s", "k"), v.rename("s", "k"));
        let cache = step.cache.write(step.start, k, v);
        let k_pos = Tensor::iota(Shape::tagged(pos.dtype(), &[("k", cache.k.dim("k"))]), "k");
        let mask = nn::causal_mask(pos.rename("s", "q"), k_pos);
        let out = nn::attention(q.rename("s", "q"), cache.k, cache.v, Some(mask));
        let out = out.merge_axes(["h", "hd"], "d").rename("q", "s");
        (self.o.forward(out), cache)
    }
}

impl Block {
    /// A block's parameters.
    pub fn new(cfg: &LlamaConfig) -> Block {
        Block {
            attn_norm: RmsNorm::new(("d", cfg.dim), cfg.rms_eps),
            attn: Attention::new(cfg),
            ffn_norm: RmsNorm::new(("d", cfg.dim), cfg.rms_eps),
            mlp: GatedMlp::new(("d", cfg.dim), cfg.ffn_dim),
        }
    }

    /// `x + attn(norm(x))`, then `+ mlp(norm(.))`.
    pub fn forward(&self, x: Tensor, pos: Tensor, step: Step) -> (Tensor, KvCache) {
        let (a, cache) = self.attn.forward(self.attn_norm.forward(x), pos, step);
        let x = x + a;
        let x = x + self.mlp.forward(self.ffn_norm.forward(x));
        (x, cache)
    }
}

impl Llama {
    /// The model's parameters (placeholders until loaded).
    pub fn new(cfg: &LlamaConfig) -> Llama {
        Llama {
            embed: Embedding::new(cfg.vocab, ("d", cfg.dim)),
            layers: (0..cfg.n_layers).map(|_| Block::new(cfg)).collect(),
            norm: RmsNorm::new(("d", cfg.dim), cfg.rms_eps),
            output: (!cfg.tied_embeddings).then(|| Linear::new(("d", cfg.dim), ("voc", cfg.vocab))),
            cfg: cfg.clone(),
        }
    }
}

impl CausalLm for Llama {
    type Block = Block;

    fn cache_shapes(&self, capacity: usize) -> Vec<Shape> {
        let (cfg, capacity) = (&self.cfg, capacity as i64);
        let shape = KvCache::shape(1, capacity, cfg.n_kv_heads, cfg.head_dim(), DType::F32);
        vec![shape; cfg.n_layers]
    }

    fn embed(&self, ids: Tensor, start: Tensor) -> (Tensor, Tensor) {
        (
            self.embed.forward(ids),
            Tensor::iota(ids.shape(), "s") + start,
        )
    }

    fn blocks(&self) -> &[Block] {
        &self.layers
    }

    fn block_weights(weights: &Bufferized<Llama>) -> &[Bufferized<Block>] {
        &weights.layers
    }

    fn block(block: &Block, x: Tensor, pos: Tensor, step: Step) -> (Tensor, KvCache) {
        block.forward(x, pos, step)
    }

    fn head(&self, x: Tensor, last: Tensor) -> Tensor {
        let zero = Tensor::scalar(0.0, DType::I32);
        let size = |t: &str| x.dim(t);
        let x = x
            .dynamic_slice(&[zero, last, zero], &[size("b"), 1, size("d")])
            .squeeze("s");
        let x = self.norm.forward(x);
        match &self.output {
            Some(o) => o.forward(x),
            None => self.embed.unembed(x, "d"),
        }
    }
}

/// A SmolLM2-style model on a device, ready to generate.
pub type LlamaRunner = Generator<Llama>;
