//! Llama decoder (SmolLM2-135M-Instruct), read from a llama.cpp GGUF file.
//!
//! The architecture is LLaMA (Touvron et al. 2023, <https://arxiv.org/abs/2302.13971>):
//! pre-norm blocks of RMSNorm, grouped-query attention with rotary positions
//! and a SwiGLU MLP; upstream code: Hugging Face `transformers`
//! `models/llama/modeling_llama.py` and llama.cpp `src/llama-model.cpp`.
//! GGUF stores `attn_q`/`attn_k` with rows permuted for adjacent-pair rotary
//! embeddings; they are used as stored, with [`RopeLayout::AdjacentPair`].
//!
//! Running: [`Llama`] is the model struct (parameters only, its field paths
//! name the weights); [`LlamaRunner`] owns the uploaded weights, a prefill
//! executable per prompt-length bucket (prompts are right-padded to 32, 64,
//! 128, ... so a new length does not recompile) and one decode executable.
//! Both write the keys and values of each layer into a cache of
//! `capacity` positions, which the decode step takes and returns.
//!
//! Axes: `b` batch, `s` sequence, `d` model width, `h` heads, `hd` head width,
//! `ff` MLP width, `voc` vocabulary; inside attention `s` becomes `q` (queries)
//! or `k` (keys).

use std::collections::HashMap;
use std::path::Path;

use radix::io::{Gguf, WeightStore};
use radix::nn::{self, Embedding, GatedMlp, KvCache, Linear, RmsNorm, RopeLayout, Rotary, Sampler};
use radix::{Buffer, DType, Executable, Module, Platform, Shape, Size, Tensor};

use crate::{Error, Result};

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
    /// Reads the configuration from `gguf`'s metadata.
    pub fn from_gguf(gguf: &Gguf) -> Result<LlamaConfig> {
        let num = |key: &str| {
            gguf.get(key)
                .and_then(|v| v.as_f64())
                .ok_or_else(|| Error::Config {
                    path: gguf.path().to_path_buf(),
                    message: format!("metadata {key} missing or not a number"),
                })
        };
        let vocab = match gguf.tensor_info("token_embd.weight") {
            Some(info) => info.dims[0],
            None => num("llama.vocab_size")? as i64,
        };
        Ok(LlamaConfig {
            n_layers: num("llama.block_count")? as usize,
            dim: num("llama.embedding_length")? as i64,
            n_heads: num("llama.attention.head_count")? as i64,
            n_kv_heads: num("llama.attention.head_count_kv")? as i64,
            ffn_dim: num("llama.feed_forward_length")? as i64,
            vocab,
            rope_theta: num("llama.rope.freq_base")?,
            rms_eps: num("llama.attention.layer_norm_rms_epsilon")?,
            tied_embeddings: gguf.tensor_info("output.weight").is_none(),
        })
    }

    /// The width of one head.
    pub fn head_dim(&self) -> i64 {
        self.dim / self.n_heads
    }
}

/// Self-attention of one block.
#[derive(Module, Clone, Debug)]
pub struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    #[module(skip)]
    n_heads: i64,
    #[module(skip)]
    n_kv_heads: i64,
    #[module(skip)]
    rope: Rotary,
}

/// One pre-norm transformer block.
#[derive(Module, Clone, Debug)]
pub struct Block {
    attn_norm: RmsNorm,
    attn: Attention,
    ffn_norm: RmsNorm,
    mlp: GatedMlp,
}

/// The model: embedding, blocks, final norm and (unless tied) output projection.
#[derive(Module, Clone, Debug)]
pub struct Llama {
    embed: Embedding,
    layers: Vec<Block>,
    norm: RmsNorm,
    output: Option<Linear>,
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
    /// into `cache` from position `start` and attends over the whole cache,
    /// hiding keys after each query's position.
    pub fn forward(
        &self,
        x: Tensor,
        pos: Tensor,
        cache: KvCache,
        start: Tensor,
    ) -> (Tensor, KvCache) {
        let heads = |t: Tensor, n: i64| t.split_axis("d", &[("h", n.into()), ("hd", Size::Auto)]);
        let q = self
            .rope
            .forward(heads(self.q.forward(x), self.n_heads), pos);
        let k = self
            .rope
            .forward(heads(self.k.forward(x), self.n_kv_heads), pos);
        let v = heads(self.v.forward(x), self.n_kv_heads);
        let cache = cache.update(k.rename("s", "k"), v.rename("s", "k"), start);
        let capacity = cache.k.dim("k");
        let k_pos = Tensor::iota(Shape::tagged(pos.dtype(), &[("k", capacity)]), "k");
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
    pub fn forward(
        &self,
        x: Tensor,
        pos: Tensor,
        cache: KvCache,
        start: Tensor,
    ) -> (Tensor, KvCache) {
        let (a, cache) = self
            .attn
            .forward(self.attn_norm.forward(x), pos, cache, start);
        let x = x + a;
        let x = x + self.mlp.forward(self.ffn_norm.forward(x));
        (x, cache)
    }
}

impl Llama {
    /// The model's parameters (placeholders until bound).
    pub fn new(cfg: &LlamaConfig) -> Llama {
        Llama {
            embed: Embedding::new(cfg.vocab, ("d", cfg.dim)),
            layers: (0..cfg.n_layers).map(|_| Block::new(cfg)).collect(),
            norm: RmsNorm::new(("d", cfg.dim), cfg.rms_eps),
            output: (!cfg.tied_embeddings).then(|| Linear::new(("d", cfg.dim), ("voc", cfg.vocab))),
        }
    }

    /// Logits `(b, voc)` at position `last` (rank-0 `i32`) of token `ids`
    /// `(b, s)` placed at positions `start..start + s` (`start` rank-0 `i32`),
    /// and the caches with the tokens' keys and values written.
    pub fn forward(
        &self,
        ids: Tensor,
        start: Tensor,
        last: Tensor,
        caches: Vec<KvCache>,
    ) -> (Tensor, Vec<KvCache>) {
        let pos = Tensor::iota(ids.shape(), "s") + start;
        let mut x = self.embed.forward(ids);
        let mut out = Vec::with_capacity(caches.len());
        for (layer, cache) in self.layers.iter().zip(caches) {
            let (y, c) = layer.forward(x, pos, cache, start);
            x = y;
            out.push(c);
        }
        let zero = Tensor::scalar(0.0, DType::I32);
        let size = |t: &str| x.dim(t);
        let x = x
            .dynamic_slice(&[zero, last, zero], &[size("b"), 1, size("d")])
            .squeeze("s");
        let x = self.norm.forward(x);
        let logits = match &self.output {
            Some(o) => o.forward(x),
            None => self.embed.unembed(x, "d"),
        };
        (logits, out)
    }
}

/// The GGUF name of the model's field path `path` (`layers.3.attn.q.weight`
/// -> `blk.3.attn_q.weight`).
pub fn gguf_name(path: &str) -> String {
    let renames = [
        ("embed.", "token_embd."),
        ("norm.", "output_norm."),
        ("output.", "output."),
        ("layers.", "blk."),
        ("attn.q.", "attn_q."),
        ("attn.k.", "attn_k."),
        ("attn.v.", "attn_v."),
        ("attn.o.", "attn_output."),
        ("mlp.gate.", "ffn_gate."),
        ("mlp.up.", "ffn_up."),
        ("mlp.down.", "ffn_down."),
    ];
    let mut res = String::new();
    let mut rest = path;
    'outer: while !rest.is_empty() {
        // Only whole dotted components at the start of `rest` are renamed.
        let at_component = res.is_empty() || res.ends_with('.');
        if at_component {
            for (from, to) in renames {
                if let Some(r) = rest.strip_prefix(from) {
                    res.push_str(to);
                    rest = r;
                    continue 'outer;
                }
            }
        }
        let end = rest.find('.').map_or(rest.len(), |i| i + 1);
        res.push_str(&rest[..end]);
        rest = &rest[end..];
    }
    res
}

/// The prompt-length buckets: 32, 64, 128, ... up to the capacity.
fn bucket(n: usize) -> usize {
    n.max(32).next_power_of_two()
}

/// The key/value caches of one sequence on the device, and how many
/// positions hold tokens.
pub struct Cache {
    buffers: Vec<Buffer>,
    len: usize,
}

impl Cache {
    /// How many positions hold tokens.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position holds a token.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The model on a device: weights uploaded once and shared by a prefill
/// executable per prompt bucket and a decode executable (compiled on first
/// use). Batch size 1.
pub struct LlamaRunner {
    platform: Platform,
    cfg: LlamaConfig,
    model: Llama,
    weights: Vec<Buffer>,
    capacity: usize,
    prefill: HashMap<usize, Executable>,
    decode: Option<Executable>,
    eos: Option<u32>,
}

impl LlamaRunner {
    /// Reads the configuration and weights from `gguf` and uploads the
    /// weights; the cache holds `capacity` positions.
    pub fn load(platform: &Platform, gguf: Gguf, capacity: usize) -> Result<LlamaRunner> {
        let cfg = LlamaConfig::from_gguf(&gguf)?;
        let eos = gguf
            .get("tokenizer.ggml.eos_token_id")
            .and_then(|v| v.as_i64())
            .map(|v| v as u32);
        let model = Llama::new(&cfg);
        let store = WeightStore::new(vec![Box::new(gguf)], gguf_name);
        let weights = nn::load_weights(platform, &store, &model)?;
        Ok(LlamaRunner {
            platform: platform.clone(),
            cfg,
            model,
            weights,
            capacity,
            prefill: HashMap::new(),
            decode: None,
            eos,
        })
    }

    /// Opens the GGUF file at `path` and [`LlamaRunner::load`]s it.
    pub fn open(platform: &Platform, path: &Path, capacity: usize) -> Result<LlamaRunner> {
        LlamaRunner::load(platform, Gguf::open(path)?, capacity)
    }

    /// The configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// The number of positions the cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Compiles (or loads from the executable cache) the prefill executable
    /// for prompts of `n` tokens and the decode executable, so that the
    /// first [`LlamaRunner::prefill`] and [`LlamaRunner::decode`] only run.
    pub fn compile(&mut self, n: usize) -> Result<()> {
        self.ensure_prefill(n)?;
        self.ensure_decode()
    }

    /// Compiles the prefill executable for prompts of `n` tokens if it is not
    /// there yet; returns its bucket length.
    fn ensure_prefill(&mut self, n: usize) -> Result<usize> {
        let len = bucket(n);
        if n == 0 || len > self.capacity {
            return Err(Error::Input(format!(
                "{n} tokens (bucket {len}) do not fit the cache of {} positions",
                self.capacity
            )));
        }
        if !self.prefill.contains_key(&len) {
            let exe = compile_step(
                &self.platform,
                &self.model,
                &self.cfg,
                len,
                self.capacity,
                false,
            )?;
            self.prefill.insert(len, exe);
        }
        Ok(len)
    }

    /// Compiles the decode executable if it is not there yet.
    fn ensure_decode(&mut self) -> Result<()> {
        if self.decode.is_none() {
            let exe = compile_step(
                &self.platform,
                &self.model,
                &self.cfg,
                1,
                self.capacity,
                true,
            )?;
            self.decode = Some(exe);
        }
        Ok(())
    }

    /// Runs the prompt `ids` from position 0: the last position's logits and
    /// the cache holding the prompt.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<(Vec<f32>, Cache)> {
        let n = ids.len();
        let len = self.ensure_prefill(n)?;
        let exe = &self.prefill[&len];
        let mut padded: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
        padded.resize(len, 0);
        let ids_buf = Buffer::from_slice(
            &self.platform,
            &padded,
            Shape::tagged(DType::I32, &[("b", 1), ("s", len as i64)]),
        )?;
        let start = scalar(&self.platform, 0)?;
        let last = scalar(&self.platform, n as i32 - 1)?;
        let mut args: Vec<&Buffer> = self.weights.iter().collect();
        args.extend([&ids_buf, &start, &last]);
        let mut out = exe.call(&args)?;
        let buffers = out.split_off(1);
        Ok((out[0].to_vec::<f32>()?, Cache { buffers, len: n }))
    }

    /// Appends `token` to `cache` and returns the logits after it. The cache's
    /// buffers are donated to the step, which writes the new cache into them.
    pub fn decode(&mut self, token: u32, cache: &mut Cache) -> Result<Vec<f32>> {
        if cache.len >= self.capacity {
            return Err(Error::Input(format!(
                "the cache of {} positions is full",
                self.capacity
            )));
        }
        self.ensure_decode()?;
        let exe = self.decode.as_ref().expect("compiled just above");
        let ids_buf = Buffer::from_slice(
            &self.platform,
            &[token as i32],
            Shape::tagged(DType::I32, &[("b", 1), ("s", 1)]),
        )?;
        let start = scalar(&self.platform, cache.len as i32)?;
        let last = scalar(&self.platform, 0)?;
        let mut args: Vec<&Buffer> = self.weights.iter().collect();
        args.extend([&ids_buf, &start, &last]);
        args.extend(cache.buffers.iter());
        let mut out = exe.call(&args)?;
        cache.buffers = out.split_off(1);
        cache.len += 1;
        Ok(out[0].to_vec::<f32>()?)
    }

    /// Generates up to `max_tokens` after `prompt` with the KV cache, stopping
    /// after the end-of-sequence token; returns the new tokens.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampler: &mut Sampler,
    ) -> Result<Vec<u32>> {
        let mut res = vec![];
        if max_tokens == 0 {
            return Ok(res);
        }
        let (mut logits, mut cache) = self.prefill(prompt)?;
        loop {
            let next = sampler.pick(&logits) as u32;
            res.push(next);
            if res.len() == max_tokens || Some(next) == self.eos {
                return Ok(res);
            }
            logits = self.decode(next, &mut cache)?;
        }
    }

    /// Like [`LlamaRunner::generate`] without the cache: each step runs the
    /// whole sequence again through the prefill executables.
    pub fn generate_without_cache(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampler: &mut Sampler,
    ) -> Result<Vec<u32>> {
        let mut seq = prompt.to_vec();
        let mut res = vec![];
        while res.len() < max_tokens {
            let (logits, _) = self.prefill(&seq)?;
            let next = sampler.pick(&logits) as u32;
            res.push(next);
            seq.push(next);
            if Some(next) == self.eos {
                break;
            }
        }
        Ok(res)
    }
}

fn scalar(platform: &Platform, v: i32) -> Result<Buffer> {
    Ok(Buffer::from_slice(
        platform,
        &[v],
        Shape::scalar(DType::I32),
    )?)
}

/// Compiles a step over `len` tokens. The weights are the first inputs (so
/// that every executable shares one upload), then `ids (b, s)`, `start` and
/// `last`, then (for decode) the caches, which are donated; results are the
/// logits and caches.
fn compile_step(
    platform: &Platform,
    model: &Llama,
    cfg: &LlamaConfig,
    len: usize,
    capacity: usize,
    with_cache: bool,
) -> Result<Executable> {
    let ids = Tensor::param(Shape::tagged(DType::I32, &[("b", 1), ("s", len as i64)]));
    let i32_scalar = Tensor::param(Shape::scalar(DType::I32));
    let cache_shape = Shape::tagged(
        DType::F32,
        &[
            ("b", 1),
            ("k", capacity as i64),
            ("h", cfg.n_kv_heads),
            ("hd", cfg.head_dim()),
        ],
    );
    let caches: Vec<KvCache> = if with_cache {
        (0..cfg.n_layers)
            .map(|_| {
                KvCache::new(
                    1,
                    capacity as i64,
                    cfg.n_kv_heads,
                    cfg.head_dim(),
                    DType::F32,
                )
            })
            .collect()
    } else {
        vec![]
    };
    let n_layers = cfg.n_layers;
    let inputs = (model.clone(), ids, i32_scalar, i32_scalar, caches);
    Ok(radix::compile(
        platform,
        &(),
        &inputs,
        |_, (m, ids, start, last, caches)| {
            if caches.is_empty() {
                let zeros = Tensor::zeros(cache_shape);
                return m.forward(
                    ids,
                    start,
                    last,
                    vec![KvCache { k: zeros, v: zeros }; n_layers],
                );
            }
            // The decode step writes each layer's cache into the buffer it
            // was passed in (donated), so a step copies no cache.
            let (logits, out) = m.forward(ids, start, last, caches.clone());
            let out = out
                .into_iter()
                .zip(caches)
                .map(|(new, old)| KvCache {
                    k: new.k.reuse_buffer(old.k),
                    v: new.v.reuse_buffer(old.v),
                })
                .collect();
            (logits, out)
        },
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names() {
        assert_eq!(gguf_name("embed.weight"), "token_embd.weight");
        assert_eq!(gguf_name("norm.weight"), "output_norm.weight");
        assert_eq!(
            gguf_name("layers.12.attn.o.weight"),
            "blk.12.attn_output.weight"
        );
        assert_eq!(
            gguf_name("layers.0.attn_norm.weight"),
            "blk.0.attn_norm.weight"
        );
        assert_eq!(
            gguf_name("layers.3.ffn_norm.weight"),
            "blk.3.ffn_norm.weight"
        );
        assert_eq!(
            gguf_name("layers.3.mlp.gate.weight"),
            "blk.3.ffn_gate.weight"
        );
    }

    #[test]
    fn decode_donates_the_caches() {
        let cfg = LlamaConfig {
            n_layers: 2,
            dim: 8,
            n_heads: 2,
            n_kv_heads: 1,
            ffn_dim: 16,
            vocab: 10,
            rope_theta: 10000.0,
            rms_eps: 1e-5,
            tied_embeddings: true,
        };
        let platform = radix::testing::platform();
        let model = Llama::new(&cfg);
        let exe = compile_step(&platform, &model, &cfg, 1, 4, true).unwrap();
        let n_params = radix::module::tensors(&model).len();
        let aliases = exe.program().aliases();
        // Weights, ids, start and last are kept; cache k/v of each layer go
        // to results 1.. in order.
        assert!(aliases[..n_params + 3].iter().all(Option::is_none));
        let cache: Vec<Option<usize>> = (1..=4).map(Some).collect();
        assert_eq!(&aliases[n_params + 3..], cache.as_slice());
    }

    #[test]
    fn buckets() {
        assert_eq!(bucket(1), 32);
        assert_eq!(bucket(33), 64);
        assert_eq!(bucket(128), 128);
    }
}
