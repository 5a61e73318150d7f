//! The pieces every decoder-only transformer here is built of: its
//! configuration, grouped-query self-attention with rotary positions, an
//! optional sliding window and optional query/key norms, and the model
//! around a stack of blocks (embedding, blocks, final norm, head). Each
//! architecture's file (`llama.rs`, `qwen2.rs`, `qwen3.rs`, `mistral.rs`,
//! `gemma3.rs`) says which of these it uses and how its files name them;
//! `transformer/gguf.rs` and `transformer/hf.rs` read a configuration from
//! a GGUF file or a Hugging Face folder.
//!
//! Axes: `b` batch, `s` sequence, `d` model width, `h` heads, `hd` head
//! width, `ff` MLP width, `voc` vocabulary; inside attention `s` becomes `q`
//! (queries) or `k` (keys).

use radix::nn::{
    self, CacheType, Embedding, KvCache, Linear, RmsNorm, RopeLayout, RopeScaling, Rotary,
};
use radix::{Bufferized, DType, Module, Shape, Size, Tensor};

mod block;
pub(crate) mod gguf;
pub(crate) mod hf;
mod stacked;
mod tensor_parallel;

pub use block::Block;
pub use stacked::Stacked;
pub use tensor_parallel::{Partials, Shard};

/// The architectures radix runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// LLaMA (`llama.rs`).
    Llama,
    /// Mistral: LLaMA with a sliding window (`mistral.rs`).
    Mistral,
    /// Qwen2: biases on the query, key and value projections (`qwen2.rs`).
    Qwen2,
    /// Qwen3: RMS norms on queries and keys (`qwen3.rs`).
    Qwen3,
    /// Gemma 3 (`gemma3.rs`).
    Gemma3,
}

impl Arch {
    /// Every architecture, in the order error messages list them.
    pub const ALL: [Arch; 5] = [
        Arch::Llama,
        Arch::Mistral,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Gemma3,
    ];

    /// The name GGUF's `general.architecture` gives it (Mistral files
    /// converted by llama.cpp say `llama`).
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Mistral => "mistral",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }

    /// The `model_type` of a Hugging Face `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Arch::Gemma3 => "gemma3_text",
            other => other.gguf_name(),
        }
    }

    /// The architecture GGUF calls `name`, or an error message naming it
    /// and listing the known ones.
    pub fn from_gguf_name(name: &str) -> Result<Arch, String> {
        Arch::ALL
            .into_iter()
            .find(|a| a.gguf_name() == name)
            .ok_or_else(|| unknown(name, Arch::gguf_name))
    }

    /// The architecture of `model_type`, or an error message naming it and
    /// listing the known ones.
    pub fn from_model_type(name: &str) -> Result<Arch, String> {
        Arch::ALL
            .into_iter()
            .find(|a| a.model_type() == name)
            .ok_or_else(|| unknown(name, Arch::model_type))
    }
}

fn unknown(name: &str, known: fn(Arch) -> &'static str) -> String {
    let known: Vec<&str> = Arch::ALL.into_iter().map(known).collect();
    format!(
        "architecture {name:?} is not one radix runs (known: {})",
        known.join(", ")
    )
}

/// The hyper-parameters of a decoder, from a GGUF file's metadata or a
/// Hugging Face `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    /// Which architecture.
    pub arch: Arch,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Model width.
    pub dim: i64,
    /// Query heads.
    pub n_heads: i64,
    /// Key/value heads.
    pub n_kv_heads: i64,
    /// The width of one head (`dim / n_heads` unless the file says).
    pub head_dim: i64,
    /// MLP width.
    pub ffn_dim: i64,
    /// Vocabulary size (rows of the embedding).
    pub vocab: i64,
    /// Rotary base of full-attention layers.
    pub rope_theta: f64,
    /// How full-attention layers stretch their rotary frequencies.
    pub rope_scaling: RopeScaling,
    /// Rotary base of sliding-window layers.
    pub rope_theta_sliding: f64,
    /// Which rotary pairs the stored query and key rows form.
    pub rope_layout: RopeLayout,
    /// RMSNorm epsilon.
    pub rms_eps: f64,
    /// What RMS norms add to their stored weight (1 for Gemma's Hugging Face
    /// checkpoints, which store `weight - 1`; GGUF files store the weight).
    pub norm_offset: f64,
    /// The scale of attention scores (`1 / sqrt(head_dim)` for most).
    pub attn_scale: f64,
    /// How many positions a sliding-window layer sees (itself included).
    pub sliding_window: Option<i64>,
    /// Per layer, whether it attends within the window (empty: none does).
    pub sliding_layers: Vec<bool>,
    /// Whether the output projection is the embedding table.
    pub tied_embeddings: bool,
    /// Whether the blocks' outputs are whole or one process's partial sums
    /// of a tensor-parallel job's ([`DecoderConfig::shard`]).
    pub partials: Partials,
}

impl DecoderConfig {
    /// A configuration of `arch` with these sizes and the usual defaults:
    /// rope base 10000 unscaled, GGUF's adjacent-pair rotary layout, RMS
    /// epsilon 1e-5, no sliding window, tied embeddings.
    pub fn new(
        arch: Arch,
        n_layers: usize,
        dim: i64,
        heads: (i64, i64),
        ffn_dim: i64,
        vocab: i64,
    ) -> Self {
        let head_dim = dim / heads.0;
        DecoderConfig {
            arch,
            n_layers,
            dim,
            n_heads: heads.0,
            n_kv_heads: heads.1,
            head_dim,
            ffn_dim,
            vocab,
            rope_theta: 10000.0,
            rope_scaling: RopeScaling::None,
            rope_theta_sliding: 10000.0,
            rope_layout: RopeLayout::AdjacentPair,
            rms_eps: 1e-5,
            norm_offset: 0.0,
            attn_scale: 1.0 / (head_dim as f64).sqrt(),
            sliding_window: None,
            sliding_layers: vec![],
            tied_embeddings: true,
            partials: Partials::Whole,
        }
    }

    /// Whether layer `i` attends within the sliding window.
    pub fn is_sliding(&self, i: usize) -> bool {
        self.sliding_window.is_some() && self.sliding_layers.get(i).copied().unwrap_or(false)
    }

    /// An RMS norm over `(tag, size)` as this model's checkpoints store it.
    pub fn norm(&self, axis: (&str, i64)) -> RmsNorm {
        RmsNorm::new(axis, self.rms_eps).with_offset(self.norm_offset)
    }
}

/// Self-attention of one block (`blk.N.attn_q`, ... in GGUF): grouped-query
/// heads with rotary positions, optionally biased projections (Qwen2),
/// RMS norms on each query and key head (Qwen3, Gemma 3) and a sliding
/// window (Mistral, Gemma 3).
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
    #[module(rename = "attn_q_norm")]
    q_norm: Option<RmsNorm>,
    #[module(rename = "attn_k_norm")]
    k_norm: Option<RmsNorm>,
    rope: Rotary,
    n_heads: i64,
    n_kv_heads: i64,
    #[module(skip)]
    window: Option<i64>,
    /// What the scores' `1 / sqrt(head_dim)` is multiplied by.
    #[module(skip)]
    rescale: f64,
}

impl Attention {
    /// The attention of layer `layer`.
    pub fn new(cfg: &DecoderConfig, layer: usize) -> Attention {
        let (d, hd) = (cfg.dim, cfg.head_dim);
        let bias = cfg.arch == Arch::Qwen2;
        let qk_norm = matches!(cfg.arch, Arch::Qwen3 | Arch::Gemma3);
        let proj = |n: i64| {
            let l = Linear::new(("d", d), ("d", n * hd));
            if bias { l.with_bias() } else { l }
        };
        let sliding = cfg.is_sliding(layer);
        let rope = if sliding {
            Rotary::new(hd, cfg.rope_theta_sliding, cfg.rope_layout)
        } else {
            Rotary::scaled(hd, cfg.rope_theta, cfg.rope_layout, &cfg.rope_scaling)
        };
        Attention {
            q: proj(cfg.n_heads),
            k: proj(cfg.n_kv_heads),
            v: proj(cfg.n_kv_heads),
            o: Linear::new(("d", cfg.n_heads * hd), ("d", d)),
            q_norm: qk_norm.then(|| cfg.norm(("hd", hd))),
            k_norm: qk_norm.then(|| cfg.norm(("hd", hd))),
            rope,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            window: if sliding { cfg.sliding_window } else { None },
            // Exactly 1 where the scale is the usual one, so that no
            // multiply is traced for it.
            rescale: match cfg.attn_scale * (hd as f64).sqrt() {
                r if (r - 1.0).abs() < 1e-12 => 1.0,
                r => r,
            },
        }
    }

    /// The projections, each with its name in the block (its GGUF name:
    /// `attn_q`, `attn_k`, `attn_v`, `attn_output`).
    pub fn linears_mut(&mut self) -> [(&'static str, &mut Linear); 4] {
        [
            ("attn_q", &mut self.q),
            ("attn_k", &mut self.k),
            ("attn_v", &mut self.v),
            ("attn_output", &mut self.o),
        ]
    }

    /// Whether the layer attends within a sliding window.
    pub fn is_sliding(&self) -> bool {
        self.window.is_some()
    }

    /// `x` `(b, s, d)` at positions `pos` `(b, s)`: writes its keys and values
    /// into the layer's cache from position `start` and attends over it,
    /// hiding keys after each query's position (and before its window).
    pub fn forward(&self, x: Tensor, pos: Tensor, step: Step) -> (Tensor, KvCache) {
        let [q, k, v] = Linear::forward_each(x, [&self.q, &self.k, &self.v]);
        let heads = |h: Tensor, n: i64, norm: &Option<RmsNorm>| {
            let h = h.split_axis("d", &[("h", n.into()), ("hd", Size::Auto)]);
            match norm {
                Some(norm) => norm.forward(h),
                None => h,
            }
        };
        let q = self.rope.forward(heads(q, self.n_heads, &self.q_norm), pos);
        let k = self
            .rope
            .forward(heads(k, self.n_kv_heads, &self.k_norm), pos);
        let v = heads(v, self.n_kv_heads, &None);
        // `nn::attention` scales scores by 1 / sqrt(head_dim); a model that
        // scales otherwise (Gemma 3's query_pre_attn_scalar) scales q.
        let q = if self.rescale == 1.0 {
            q
        } else {
            q * self.rescale
        };
        let (k, v) = (k.rename("s", "k"), v.rename("s", "k"));
        let (q, q_pos) = (q.rename("s", "q"), pos.rename("s", "q"));
        let (out, cache) = if step.cache.k.dim("k") == 0 {
            // A cache of no positions (a training loss's forward): the
            // step's own keys, each query those up to its position. XLA
            // then sees plain attention, which it differentiates as JAX's
            // program, with no cache written or kernel called.
            let mask = nn::window_mask(q_pos, pos.rename("s", "k"), self.window);
            (nn::attention(q, k, v, Some(mask)), step.cache)
        } else {
            let (cache, read) = match step.layer {
                None => {
                    let cache = step.cache.write(step.start, k, v);
                    (cache, cache)
                }
                Some(i) => {
                    let cache = step.cache.write_layer(i, step.start, k, v);
                    (cache, cache.layer(i))
                }
            };
            // Reads the step's rows of the cache (a batch's cache may hold
            // more: free slots after the running sequences), each query the
            // positions up to its own (and within the window).
            (nn::cached_attention(q, q_pos, read, self.window), cache)
        };
        let out = out.merge_axes(["h", "hd"], "d").rename("q", "s");
        (self.o.forward(out), cache)
    }
}

/// What a layer needs besides its input: its cache and the first position
/// written (rank-0 `i32`, or one per row `(b)`).
#[derive(Module, Clone, Copy, Debug)]
pub struct Step {
    /// The layer's keys and values, or, with `layer`, every layer's
    /// stacked ([`KvCache::stacked_shape`]).
    pub cache: KvCache,
    /// Where the step's tokens go in the cache.
    pub start: Tensor,
    /// Which layer of a stacked `cache` is this one's (a rank-0 integer:
    /// a loop over the layers), or `None` where `cache` is the layer's own.
    pub layer: Option<Tensor>,
}

/// A decoder: embedding, blocks, final norm and (unless tied) output
/// projection, its fields named for its GGUF weights. Every architecture
/// radix runs is this type; [`DecoderConfig::arch`] says what differs.
#[derive(Module, Clone, Debug)]
pub struct Decoder {
    #[module(rename = "token_embd")]
    embed: Embedding,
    #[module(rename = "blk")]
    layers: Vec<Block>,
    #[module(rename = "output_norm")]
    norm: RmsNorm,
    output: Option<Linear>,
    #[module(skip)]
    cfg: DecoderConfig,
    /// How its key/value caches store keys and values: one that holds
    /// heads of `cfg.head_dim` ([`Decoder::with_cache_type`] checks).
    #[module(skip)]
    cache_type: CacheType,
}

impl Decoder {
    /// The model's parameters (placeholders until loaded).
    pub fn new(cfg: &DecoderConfig) -> Decoder {
        Decoder {
            embed: Embedding::new(cfg.vocab, ("d", cfg.dim)),
            layers: (0..cfg.n_layers).map(|i| Block::new(cfg, i)).collect(),
            norm: cfg.norm(("d", cfg.dim)),
            output: (!cfg.tied_embeddings).then(|| Linear::new(("d", cfg.dim), ("voc", cfg.vocab))),
            cfg: cfg.clone(),
            cache_type: CacheType::F32,
        }
    }

    /// The layers, in order.
    pub fn blocks(&self) -> &[Block] {
        &self.layers
    }

    /// The blocks, to change in place (adapters added by
    /// [`Decoder::with_lora`]).
    pub(crate) fn blocks_mut(&mut self) -> &mut [Block] {
        &mut self.layers
    }

    /// The layers' weights within the model's.
    pub(crate) fn block_weights(weights: &Bufferized<Decoder>) -> &[Bufferized<Block>] {
        &weights.layers
    }

    /// The configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// The same decoder with key/value caches of `ty` (f32 unless set; its
    /// parameters are unchanged). `Err`, naming the head width, where `ty`
    /// cannot hold the model's heads (Q8_0 needs a multiple of 32).
    pub fn with_cache_type(self, ty: CacheType) -> Result<Self, crate::Error> {
        ty.check(self.cfg.head_dim).map_err(crate::Error::Input)?;
        Ok(Decoder {
            cache_type: ty,
            ..self
        })
    }

    /// How its key/value caches store keys and values.
    pub fn cache_type(&self) -> CacheType {
        self.cache_type
    }

    /// The shape of the keys (and values) of each layer's cache of
    /// `capacity` positions for one sequence (see [`KvCache::shape`]).
    pub fn cache_shapes(&self, capacity: usize) -> Vec<Shape> {
        vec![self.layer_cache_shape(capacity); self.cfg.n_layers]
    }

    /// The shape of one sequence's cache of every layer, stacked along a
    /// leading `layer` axis ([`KvCache::stacked_shape`]): what
    /// [`Stacked::forward`] carries.
    pub fn stacked_cache_shape(&self, capacity: usize) -> Shape {
        let shape = self.layer_cache_shape(capacity);
        KvCache::stacked_shape(self.cfg.n_layers as i64, shape).expect("a cache has rank 4")
    }

    /// The shape of one layer's cache of `capacity` positions for one
    /// sequence.
    fn layer_cache_shape(&self, capacity: usize) -> Shape {
        let cfg = &self.cfg;
        let (kv, hd) = (cfg.n_kv_heads, cfg.head_dim);
        KvCache::shape(1, capacity as i64, kv, hd, self.cache_type)
            .expect("with_cache_type checked the heads' width; sizes are not negative")
    }

    /// The decoder without its blocks: its embedding, final norm and head.
    pub(crate) fn without_blocks(&self) -> Decoder {
        Decoder {
            layers: vec![],
            ..self.clone()
        }
    }

    /// The weights of [`Decoder::without_blocks`] within the model's
    /// (shared, not copied).
    pub(crate) fn ends_of(weights: &Bufferized<Decoder>) -> Bufferized<Decoder> {
        DecoderWith {
            embed: weights.embed.clone(),
            layers: vec![],
            norm: weights.norm.clone(),
            output: weights.output.clone(),
            cfg: weights.cfg.clone(),
            cache_type: weights.cache_type,
        }
    }

    /// The hidden states `(b, s, d)` of token `ids` `(b, s)` placed at
    /// positions `start..start + s` (`start` rank-0 `i32`), and those
    /// positions `(b, s)`.
    pub fn embed(&self, ids: Tensor, start: Tensor) -> (Tensor, Tensor) {
        let x = self.embed.forward(ids);
        // Gemma scales the embeddings by sqrt(width) (rounded to f32 first,
        // as transformers does).
        let x = match self.cfg.arch {
            Arch::Gemma3 => x * f64::from((self.cfg.dim as f32).sqrt()),
            _ => x,
        };
        (x, Tensor::iota(ids.shape(), "s") + start)
    }

    /// [`Decoder::embed`] for a batch whose rows start at their own
    /// positions, `starts` `(b)` `i32` (sequences of different lengths
    /// stepping together): the embedding does not depend on the position
    /// (the positions are rotary), so it embeds from 0 and shifts them.
    pub fn embed_rows(&self, ids: Tensor, starts: Tensor) -> (Tensor, Tensor) {
        let (x, pos) = self.embed(ids, Tensor::scalar(0.0, DType::I32));
        (x, pos + starts.broadcast(pos.shape()))
    }

    /// Every block in turn over hidden states `x` at positions `pos`, the
    /// tokens' keys and values written into `caches` from `start` (rank-0,
    /// or a position per row): the last block's output. The one layer
    /// loop: each layer is one `radix::call` of the same function (its
    /// weights and its cache are arguments), so a program holds one block
    /// body, not one per layer.
    pub fn layers(
        &self,
        mut x: Tensor,
        pos: Tensor,
        start: Tensor,
        caches: &mut [KvCache],
    ) -> Tensor {
        for (block, cache) in self.layers.iter().zip(caches) {
            let step = Step {
                cache: *cache,
                start,
                layer: None,
            };
            (x, *cache) = radix::call(
                "block",
                |(b, x, pos, step)| Block::forward(b, *x, *pos, *step),
                &(block.clone(), x, pos, step),
            );
        }
        x
    }

    /// The hidden states `(b, s, d)` after the last block (before the final
    /// norm) of token `ids` at positions `start..`, and the caches with the
    /// tokens written.
    pub fn hidden(
        &self,
        ids: Tensor,
        start: Tensor,
        mut caches: Vec<KvCache>,
    ) -> (Tensor, Vec<KvCache>) {
        let (x, pos) = self.embed(ids, start);
        let x = self.layers(x, pos, start, &mut caches);
        (x, caches)
    }

    /// The whole model over token `ids` `(b, s)` at positions `start..`:
    /// logits at `last` and the caches with the tokens written.
    pub fn forward(
        &self,
        ids: Tensor,
        start: Tensor,
        last: Tensor,
        caches: Vec<KvCache>,
    ) -> (Tensor, Vec<KvCache>) {
        let (x, caches) = self.hidden(ids, start, caches);
        (self.head(x, last), caches)
    }

    /// Logits `(b, voc)` at position `last` (rank-0 `i32`) of `x`.
    pub fn head(&self, x: Tensor, last: Tensor) -> Tensor {
        let zero = Tensor::scalar(0.0, DType::I32);
        let size = |t: &str| x.dim(t);
        let x = x
            .dynamic_slice(&[zero, last, zero], &[size("b"), 1, size("d")])
            .squeeze("s");
        self.logits(x)
    }

    /// Logits at every position of hidden states `x` `(b, s, d)` (or of
    /// `(b, d)`): the final norm and the output projection (the embedding's
    /// transpose when tied). What a language-model loss reads.
    pub fn logits(&self, x: Tensor) -> Tensor {
        let x = self.norm.forward(x);
        match &self.output {
            Some(o) => o.forward(x),
            None => self.embed.unembed(x, "d"),
        }
    }

    /// The negative log-likelihood of each next token of `ids` `(b, s)` read
    /// from position 0: `(b, s - 1)`, element `j` being `-log p(ids[j + 1] |
    /// ids[..= j])` (what a perplexity averages).
    pub fn next_token_nll(&self, ids: Tensor) -> Tensor {
        let s = ids.dim("s");
        let zero = Tensor::scalar(0.0, DType::I32);
        let caches = self
            .cache_shapes(s as usize)
            .into_iter()
            .map(KvCache::zeros)
            .collect();
        let (x, _) = self.hidden(ids, zero, caches);
        let logits = self.logits(x).slice("s", 0..s - 1);
        token_nll(logits, ids.slice("s", 1..s))
    }

    /// The mean cross-entropy of next-token prediction over token `ids`
    /// `(b, s)`, `b` sequences of `s` tokens: position `i`'s logits
    /// against token `i + 1` of the same row (the loss a language model
    /// trains on). Its layers get caches of no positions, so each attends
    /// over the window's own keys in ops ([`nn::attention`]), writing no
    /// cache. The log-softmax and the mean are in f32 whatever the weights'
    /// dtype (bf16 in mixed-precision training), as the loss of bf16 models
    /// usually is: a bf16 sum of `b * (s - 1)` terms near 5 would round
    /// each partial sum to 2^-5 or coarser.
    pub fn next_token_loss(&self, ids: Tensor) -> Tensor {
        let (b, s) = (ids.dim("b"), ids.dim("s"));
        let zero = Tensor::scalar(0.0, DType::I32);
        let (kv, hd) = (self.cfg.n_kv_heads, self.cfg.head_dim);
        let caches: Vec<KvCache> = (0..self.layers.len())
            .map(|_| KvCache::zeros(no_positions(b, kv, hd)))
            .collect();
        let (x, _) = self.hidden(ids, zero, caches);
        let logits = self.logits(x).convert(DType::F32).slice("s", 0..s - 1);
        token_nll(logits, ids.slice("s", 1..s)).sum(["b", "s"]) / (b * (s - 1)) as f64
    }
}

/// `-log softmax(logits)[target]` at each position: `logits` `(b, s, voc)`,
/// `targets` `(b, s)` token ids, the result `(b, s)`.
pub(crate) fn token_nll(logits: Tensor, targets: Tensor) -> Tensor {
    let ls = logits.shape();
    let logp = logits - logits.log_sum_exp("voc").broadcast(ls);
    let vocab = Tensor::iota(ls.with_dtype(DType::I32), "voc");
    let hit = vocab.eq(targets.broadcast(vocab.shape()));
    -hit.select(logp, Tensor::zeros(ls)).sum(["voc"])
}

/// The shape of an f32 cache of `batch` rows and no positions, `kv` heads
/// of `hd` (see [`KvCache::shape`]): what a training loss's layers get.
fn no_positions(batch: i64, kv: i64, hd: i64) -> Shape {
    Shape::tagged(DType::F32, &[("b", batch), ("k", 0), ("h", kv), ("hd", hd)])
}
