//! A decoder's configuration from a GGUF file: the architecture from
//! `general.architecture`, the sizes from `<arch>.*` metadata, each checked
//! against the file's tensors before it sizes anything.

use radix::io::Gguf;
use radix::nn::{RopeLayout, RopeScaling};

use super::{Arch, DecoderConfig};
use crate::{Error, Result};

/// Sizes no model of this kind comes near; they bound what the metadata
/// can make radix allocate.
const MAX_WIDTH: f64 = (1u64 << 20) as f64;
const MAX_LAYERS: f64 = 4096.0;

/// Reads `gguf`'s metadata, each value checked as it is read.
struct Meta<'a> {
    gguf: &'a Gguf,
    /// `<arch>.`
    prefix: String,
}

impl Meta<'_> {
    fn bad(&self, message: String) -> Error {
        Error::Config {
            path: self.gguf.path().to_path_buf(),
            message,
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// `<arch>.key` as a number, if the file has it.
    fn num_opt(&self, key: &str) -> Result<Option<f64>> {
        let key = self.key(key);
        match self.gguf.get(&key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.bad(format!("metadata {key} is not a number"))),
        }
    }

    fn num(&self, key: &str) -> Result<f64> {
        self.num_opt(key)?.ok_or_else(|| {
            self.bad(format!(
                "metadata {} missing or not a number",
                self.key(key)
            ))
        })
    }

    /// A whole number from 1 to `max`, if present.
    fn count_opt(&self, key: &str, max: f64) -> Result<Option<i64>> {
        let Some(v) = self.num_opt(key)? else {
            return Ok(None);
        };
        if v.fract() != 0.0 || !(1.0..=max).contains(&v) {
            return Err(self.bad(format!(
                "metadata {} is {v}, not a whole number from 1 to {max}",
                self.key(key)
            )));
        }
        Ok(Some(v as i64))
    }

    fn count(&self, key: &str, max: f64) -> Result<i64> {
        self.num(key)?;
        Ok(self.count_opt(key, max)?.expect("present"))
    }

    /// A positive finite number, if present.
    fn positive_opt(&self, key: &str) -> Result<Option<f64>> {
        let Some(v) = self.num_opt(key)? else {
            return Ok(None);
        };
        if !(v.is_finite() && v > 0.0) {
            return Err(self.bad(format!(
                "metadata {} is {v}, not a positive number",
                self.key(key)
            )));
        }
        Ok(Some(v))
    }

    fn positive(&self, key: &str) -> Result<f64> {
        self.num(key)?;
        Ok(self.positive_opt(key)?.expect("present"))
    }
}

impl DecoderConfig {
    /// Reads the configuration from `gguf`'s metadata and checks it against
    /// the file's tensors: every value a user's file holds is validated
    /// before it sizes anything. An architecture radix does not run is an
    /// error naming it and listing those it runs.
    pub fn from_gguf(gguf: &Gguf) -> Result<DecoderConfig> {
        let bad = |message: String| Error::Config {
            path: gguf.path().to_path_buf(),
            message,
        };
        let name = gguf
            .get("general.architecture")
            .and_then(|v| v.as_str())
            .ok_or_else(|| bad("metadata general.architecture missing or not a string".into()))?;
        let arch = Arch::from_gguf_name(name).map_err(bad)?;
        let m = Meta {
            gguf,
            prefix: format!("{name}."),
        };
        let dim = m.count("embedding_length", MAX_WIDTH)?;
        let vocab = match gguf
            .tensor_info("token_embd.weight")
            .map(|t| t.dims.as_slice())
        {
            Some(&[vocab, d]) if d == dim && vocab >= 1 => vocab,
            Some(dims) => {
                return Err(bad(format!(
                    "token_embd.weight is {dims:?}, not [vocab, {dim}] ({name}.embedding_length)"
                )));
            }
            None => return Err(bad("no tensor token_embd.weight".into())),
        };
        let n_layers = m.count("block_count", MAX_LAYERS)? as usize;
        let n_heads = m.count("attention.head_count", MAX_WIDTH)?;
        let n_kv_heads = m.count("attention.head_count_kv", MAX_WIDTH)?;
        let ffn_dim = m.count("feed_forward_length", MAX_WIDTH)?;
        let mut cfg =
            DecoderConfig::new(arch, n_layers, dim, (n_heads, n_kv_heads), ffn_dim, vocab);
        if dim % n_heads != 0 && m.num_opt("attention.key_length")?.is_none() {
            return Err(bad(format!(
                "{n_heads} heads do not split a width of {dim} into heads of an even width"
            )));
        }
        cfg.head_dim = m
            .count_opt("attention.key_length", MAX_WIDTH)?
            .unwrap_or(dim / n_heads);
        if cfg.head_dim % 2 != 0 {
            return Err(bad(format!(
                "{n_heads} heads do not split a width of {dim} into heads of an even width"
            )));
        }
        if n_heads % n_kv_heads != 0 {
            return Err(bad(format!(
                "{n_heads} query heads are not a multiple of {n_kv_heads} key/value heads"
            )));
        }
        cfg.rope_theta = m.positive("rope.freq_base")?;
        cfg.rms_eps = m.positive("attention.layer_norm_rms_epsilon")?;
        cfg.tied_embeddings = gguf.tensor_info("output.weight").is_none();
        cfg.attn_scale = 1.0 / (cfg.head_dim as f64).sqrt();
        // llama.cpp permutes LLaMA's query and key rows for adjacent pairs;
        // the others keep Hugging Face's half-split layout.
        cfg.rope_layout = match arch {
            Arch::Llama | Arch::Mistral => RopeLayout::AdjacentPair,
            _ => RopeLayout::HalfSplit,
        };
        cfg.rope_scaling = rope_scaling(&m, &cfg)?;
        cfg.sliding_window = m.count_opt("attention.sliding_window", MAX_WIDTH * 64.0)?;
        if cfg.sliding_window.is_some() {
            cfg.sliding_layers = match arch {
                Arch::Gemma3 => gemma3_sliding_layers(&m, n_layers)?,
                _ => vec![true; n_layers],
            };
        }
        if arch == Arch::Gemma3 {
            crate::gemma3::from_gguf(&mut cfg, |k| m.positive_opt(k), bad)?;
        }
        let last = format!("blk.{}.attn_norm.weight", n_layers - 1);
        let beyond = format!("blk.{n_layers}.attn_norm.weight");
        if gguf.tensor_info(&last).is_none() || gguf.tensor_info(&beyond).is_some() {
            return Err(bad(format!(
                "{name}.block_count is {n_layers}, but the file's blocks do not end at blk.{}",
                n_layers - 1
            )));
        }
        Ok(cfg)
    }
}

/// `<arch>.rope.scaling.*`, or Llama 3's per-frequency factors stored as the
/// `rope_freqs.weight` tensor.
fn rope_scaling(m: &Meta, cfg: &DecoderConfig) -> Result<RopeScaling> {
    if let Some(info) = m.gguf.tensor_info("rope_freqs.weight") {
        let half = cfg.head_dim / 2;
        if info.dims != [half] {
            return Err(m.bad(format!(
                "rope_freqs.weight is {:?}, not [{half}] (half the head width)",
                info.dims
            )));
        }
        let t = m.gguf.tensor("rope_freqs.weight")?.expect("listed");
        let factors: Vec<f64> = t.to_f32_vec().into_iter().map(f64::from).collect();
        if factors.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
            return Err(m.bad("rope_freqs.weight holds a factor that is not positive".into()));
        }
        return Ok(RopeScaling::Factors(factors));
    }
    let key = m.key("rope.scaling.type");
    let Some(kind) = m.gguf.get(&key) else {
        return Ok(RopeScaling::None);
    };
    let kind = kind
        .as_str()
        .ok_or_else(|| m.bad(format!("metadata {key} is not a string")))?;
    Ok(match kind {
        "none" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: m.positive("rope.scaling.factor")?,
        },
        "yarn" => {
            let factor = m.positive("rope.scaling.factor")?;
            RopeScaling::Yarn {
                factor,
                original: m.positive("rope.scaling.original_context_length")?,
                beta_fast: m
                    .positive_opt("rope.scaling.yarn_beta_fast")?
                    .unwrap_or(32.0),
                beta_slow: m
                    .positive_opt("rope.scaling.yarn_beta_slow")?
                    .unwrap_or(1.0),
                attention_factor: m
                    .positive_opt("rope.scaling.yarn_attn_factor")?
                    .unwrap_or_else(|| RopeScaling::yarn_attention_factor(factor)),
            }
        }
        other => {
            return Err(m.bad(format!(
                "metadata {key} is {other:?}; radix knows none, linear and yarn"
            )));
        }
    })
}

/// Gemma 3's sliding layers: `<arch>.attention.sliding_window_pattern` as a
/// list of bools, or every layer but each `n`th (6 when absent, as
/// llama.cpp assumes).
fn gemma3_sliding_layers(m: &Meta, n_layers: usize) -> Result<Vec<bool>> {
    let key = m.key("attention.sliding_window_pattern");
    if let Some(list) = m.gguf.get(&key).and_then(|v| v.as_array()) {
        let flags: Option<Vec<bool>> = list.iter().map(|v| v.as_bool()).collect();
        return match flags {
            Some(f) if f.len() == n_layers => Ok(f),
            _ => Err(m.bad(format!("metadata {key} is not {n_layers} bools"))),
        };
    }
    let n = m
        .count_opt("attention.sliding_window_pattern", MAX_LAYERS)?
        .unwrap_or(6) as usize;
    Ok((0..n_layers).map(|i| i % n < n - 1).collect())
}
