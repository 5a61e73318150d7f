//! A llama model from a GGUF file: its configuration, read from the
//! metadata and checked against the file's tensors before it sizes
//! anything, and the model loaded into a runner.

use std::path::Path;

use radix::Platform;
use radix::io::Gguf;
use radix::nn::MatrixFormat;

use super::{Llama, LlamaConfig, LlamaRunner};
use crate::generate::Generator;
use crate::{Error, Result};

impl LlamaConfig {
    /// Reads the configuration from `gguf`'s metadata and checks it against
    /// the file's tensors: every value a user's file holds is validated
    /// before it sizes anything.
    pub fn from_gguf(gguf: &Gguf) -> Result<LlamaConfig> {
        let bad = |message: String| Error::Config {
            path: gguf.path().to_path_buf(),
            message,
        };
        let num = |key: &str| {
            gguf.get(key)
                .and_then(|v| v.as_f64())
                .ok_or_else(|| bad(format!("metadata {key} missing or not a number")))
        };
        // A count: a whole number from 1 to `max`.
        let count = |key: &str, max: f64| {
            let v = num(key)?;
            if v.fract() != 0.0 || !(1.0..=max).contains(&v) {
                return Err(bad(format!(
                    "metadata {key} is {v}, not a whole number from 1 to {max}"
                )));
            }
            Ok(v as i64)
        };
        let positive = |key: &str| {
            let v = num(key)?;
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(format!("metadata {key} is {v}, not a positive number")));
            }
            Ok(v)
        };
        // Sizes no model of this kind comes near; they bound what the
        // metadata can make radix allocate.
        const MAX_WIDTH: f64 = (1u64 << 20) as f64;
        const MAX_LAYERS: f64 = 4096.0;
        let dim = count("llama.embedding_length", MAX_WIDTH)?;
        let vocab = match gguf
            .tensor_info("token_embd.weight")
            .map(|t| t.dims.as_slice())
        {
            Some(&[vocab, d]) if d == dim && vocab >= 1 => vocab,
            Some(dims) => {
                return Err(bad(format!(
                    "token_embd.weight is {dims:?}, not [vocab, {dim}] (llama.embedding_length)"
                )));
            }
            None => return Err(bad("no tensor token_embd.weight".into())),
        };
        let cfg = LlamaConfig {
            n_layers: count("llama.block_count", MAX_LAYERS)? as usize,
            dim,
            n_heads: count("llama.attention.head_count", MAX_WIDTH)?,
            n_kv_heads: count("llama.attention.head_count_kv", MAX_WIDTH)?,
            ffn_dim: count("llama.feed_forward_length", MAX_WIDTH)?,
            vocab,
            rope_theta: positive("llama.rope.freq_base")?,
            rms_eps: positive("llama.attention.layer_norm_rms_epsilon")?,
            tied_embeddings: gguf.tensor_info("output.weight").is_none(),
        };
        if cfg.dim % cfg.n_heads != 0 || cfg.head_dim() % 2 != 0 {
            return Err(bad(format!(
                "{} heads do not split a width of {} into heads of an even width",
                cfg.n_heads, cfg.dim
            )));
        }
        if cfg.n_heads % cfg.n_kv_heads != 0 {
            return Err(bad(format!(
                "{} query heads are not a multiple of {} key/value heads",
                cfg.n_heads, cfg.n_kv_heads
            )));
        }
        let last = format!("blk.{}.attn_norm.weight", cfg.n_layers - 1);
        let beyond = format!("blk.{}.attn_norm.weight", cfg.n_layers);
        if gguf.tensor_info(&last).is_none() || gguf.tensor_info(&beyond).is_some() {
            return Err(bad(format!(
                "llama.block_count is {}, but the file's blocks do not end at blk.{}",
                cfg.n_layers,
                cfg.n_layers - 1
            )));
        }
        Ok(cfg)
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
        Llama::load(platform, Gguf::open(path)?, capacity, matrices)
    }

    /// Loads the model in `gguf` on `platform`, its matrices as `matrices`
    /// asks, into a runner whose cache holds `capacity` positions.
    pub fn load(
        platform: &Platform,
        gguf: Gguf,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<LlamaRunner> {
        let model = Llama::new(&LlamaConfig::from_gguf(&gguf)?);
        Generator::from_gguf(platform, model, gguf, capacity, matrices)
    }
}
