//! A decoder from a Hugging Face folder: `config.json` (the architecture
//! from `model_type`), the weights in `model.safetensors` or the shards its
//! `model.safetensors.index.json` lists (f32, bf16 or f16), and the names
//! those files give the weights.

use std::path::{Path, PathBuf};

use radix::io::Safetensors;
use radix::nn::{RopeLayout, RopeScaling};
use serde_json::Value;

use super::{Arch, DecoderConfig};
use crate::{Error, Result};

/// Sizes no model of this kind comes near (see `gguf.rs`).
const MAX_WIDTH: f64 = (1u64 << 20) as f64;
const MAX_LAYERS: f64 = 4096.0;

/// `config.json`'s values, each checked as it is read.
struct Config {
    path: PathBuf,
    json: Value,
}

impl Config {
    fn bad(&self, message: String) -> Error {
        Error::Config {
            path: self.path.clone(),
            message,
        }
    }

    /// `key` of `obj`, absent when missing or null.
    fn get<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
        obj.get(key).filter(|v| !v.is_null())
    }

    fn num_in(&self, obj: &Value, key: &str) -> Result<Option<f64>> {
        match Config::get(obj, key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.bad(format!("{key} is {v}, not a number"))),
        }
    }

    fn count_opt(&self, key: &str, max: f64) -> Result<Option<i64>> {
        let Some(v) = self.num_in(&self.json, key)? else {
            return Ok(None);
        };
        if v.fract() != 0.0 || !(1.0..=max).contains(&v) {
            return Err(self.bad(format!("{key} is {v}, not a whole number from 1 to {max}")));
        }
        Ok(Some(v as i64))
    }

    fn count(&self, key: &str, max: f64) -> Result<i64> {
        self.count_opt(key, max)?
            .ok_or_else(|| self.bad(format!("{key} missing")))
    }

    fn positive_in(&self, obj: &Value, key: &str) -> Result<Option<f64>> {
        let Some(v) = self.num_in(obj, key)? else {
            return Ok(None);
        };
        if !(v.is_finite() && v > 0.0) {
            return Err(self.bad(format!("{key} is {v}, not a positive number")));
        }
        Ok(Some(v))
    }

    fn positive(&self, key: &str) -> Result<f64> {
        self.positive_in(&self.json, key)?
            .ok_or_else(|| self.bad(format!("{key} missing")))
    }

    /// A rotary base and scaling from a `rope_parameters` entry (or, in
    /// older files, the top level's `rope_theta` and `rope_scaling`).
    fn rope(&self, params: &Value, default_theta: f64) -> Result<(f64, RopeScaling)> {
        let theta = self
            .positive_in(params, "rope_theta")?
            .or(self.positive_in(&self.json, "rope_theta")?)
            .unwrap_or(default_theta);
        let scaling = Config::get(params, "rope_type")
            .or_else(|| Config::get(params, "type"))
            .map(|t| (params, t))
            .or_else(|| {
                let s = Config::get(&self.json, "rope_scaling")?;
                Some((
                    s,
                    Config::get(s, "rope_type").or_else(|| Config::get(s, "type"))?,
                ))
            });
        let Some((s, kind)) = scaling else {
            return Ok((theta, RopeScaling::None));
        };
        let need = |key: &str| {
            self.positive_in(s, key)?
                .ok_or_else(|| self.bad(format!("rope scaling {kind} without {key}")))
        };
        let scaling = match kind.as_str() {
            Some("default") => RopeScaling::None,
            Some("linear") => RopeScaling::Linear {
                factor: need("factor")?,
            },
            Some("llama3") => RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: need("low_freq_factor")?,
                high_freq_factor: need("high_freq_factor")?,
                original: need("original_max_position_embeddings")?,
            },
            Some("yarn") => {
                let factor = need("factor")?;
                RopeScaling::Yarn {
                    factor,
                    original: need("original_max_position_embeddings")?,
                    beta_fast: self.positive_in(s, "beta_fast")?.unwrap_or(32.0),
                    beta_slow: self.positive_in(s, "beta_slow")?.unwrap_or(1.0),
                    attention_factor: self
                        .positive_in(s, "attention_factor")?
                        .unwrap_or_else(|| RopeScaling::yarn_attention_factor(factor)),
                }
            }
            _ => {
                return Err(self.bad(format!(
                    "rope scaling {kind} is not one radix knows (default, linear, llama3, yarn)"
                )));
            }
        };
        Ok((theta, scaling))
    }
}

impl DecoderConfig {
    /// Reads `config.json` in the folder `dir`, checked as
    /// [`DecoderConfig::from_gguf`] checks a GGUF file's metadata, and
    /// `weights` for what the configuration leaves out (tied embeddings).
    pub fn from_hf(dir: &Path, weights: &Safetensors) -> Result<DecoderConfig> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Config {
            path: path.clone(),
            message: format!("cannot read: {e}"),
        })?;
        let json: Value = serde_json::from_str(&text).map_err(|e| Error::Config {
            path: path.clone(),
            message: format!("not JSON: {e}"),
        })?;
        let c = Config { path, json };
        let model_type = Config::get(&c.json, "model_type")
            .and_then(|v| v.as_str())
            .ok_or_else(|| c.bad("model_type missing or not a string".into()))?;
        let arch = Arch::from_model_type(model_type).map_err(|m| c.bad(m))?;
        let dim = c.count("hidden_size", MAX_WIDTH)?;
        let n_heads = c.count("num_attention_heads", MAX_WIDTH)?;
        let n_kv_heads = c
            .count_opt("num_key_value_heads", MAX_WIDTH)?
            .unwrap_or(n_heads);
        let mut cfg = DecoderConfig::new(
            arch,
            c.count("num_hidden_layers", MAX_LAYERS)? as usize,
            dim,
            (n_heads, n_kv_heads),
            c.count("intermediate_size", MAX_WIDTH)?,
            c.count("vocab_size", MAX_WIDTH * 64.0)?,
        );
        cfg.head_dim = match c.count_opt("head_dim", MAX_WIDTH)? {
            Some(hd) => hd,
            None if dim % n_heads == 0 => dim / n_heads,
            None => {
                return Err(c.bad(format!("{n_heads} heads do not split a width of {dim}")));
            }
        };
        if cfg.head_dim % 2 != 0 || n_heads % n_kv_heads != 0 {
            return Err(c.bad(format!(
                "{n_heads} query heads of width {} over {n_kv_heads} key/value heads: \
                 not an even width, or not a multiple",
                cfg.head_dim
            )));
        }
        cfg.rms_eps = c.positive("rms_norm_eps")?;
        cfg.rope_layout = RopeLayout::HalfSplit;
        cfg.attn_scale = 1.0 / (cfg.head_dim as f64).sqrt();
        cfg.tied_embeddings = weights.info("lm_head.weight").is_none();
        let no_params = Value::Null;
        let params = Config::get(&c.json, "rope_parameters").unwrap_or(&no_params);
        let window = c.count_opt("sliding_window", MAX_WIDTH * 64.0)?;
        match arch {
            Arch::Gemma3 => {
                let full = Config::get(params, "full_attention").unwrap_or(params);
                (cfg.rope_theta, cfg.rope_scaling) = c.rope(full, 1_000_000.0)?;
                let local = Config::get(params, "sliding_attention").unwrap_or(&no_params);
                cfg.rope_theta_sliding = c
                    .positive_in(local, "rope_theta")?
                    .or(c.positive_in(&c.json, "rope_local_base_freq")?)
                    .unwrap_or(10000.0);
                cfg.norm_offset = 1.0;
                let scalar = c
                    .positive_in(&c.json, "query_pre_attn_scalar")?
                    .unwrap_or(256.0);
                cfg.attn_scale = 1.0 / scalar.sqrt();
                // Soft-capping (Gemma 2's) would change every logit.
                for key in ["final_logit_softcapping", "attn_logit_softcapping"] {
                    if Config::get(&c.json, key).is_some() {
                        return Err(c.bad(format!("{key} is set; radix has no soft-capping")));
                    }
                }
            }
            _ => (cfg.rope_theta, cfg.rope_scaling) = c.rope(params, 10000.0)?,
        }
        if window.is_some() {
            cfg.sliding_layers = sliding_layers(&c, arch, cfg.n_layers)?;
            if cfg.sliding_layers.contains(&true) {
                cfg.sliding_window = window;
            }
        }
        Ok(cfg)
    }
}

/// Which layers attend within the window: `layer_types` where the file has
/// it; else, as transformers decides, every Mistral layer, Gemma 3's all but
/// each `sliding_window_pattern`th (6th), and Qwen2's from
/// `max_window_layers` on if `use_sliding_window`.
fn sliding_layers(c: &Config, arch: Arch, n_layers: usize) -> Result<Vec<bool>> {
    if let Some(types) = Config::get(&c.json, "layer_types") {
        let flags: Option<Vec<bool>> = types.as_array().map(|a| {
            a.iter()
                .map(|t| t.as_str() == Some("sliding_attention"))
                .collect()
        });
        return match flags {
            Some(f) if f.len() == n_layers => Ok(f),
            _ => Err(c.bad(format!(
                "layer_types is not a list of {n_layers} layer types"
            ))),
        };
    }
    Ok(match arch {
        Arch::Mistral => vec![true; n_layers],
        Arch::Gemma3 => {
            let n = c
                .count_opt("sliding_window_pattern", MAX_LAYERS)?
                .unwrap_or(6) as usize;
            (0..n_layers).map(|i| (i + 1) % n != 0).collect()
        }
        _ => {
            let used = Config::get(&c.json, "use_sliding_window").and_then(Value::as_bool);
            let from = c.count_opt("max_window_layers", MAX_LAYERS)?.unwrap_or(0) as usize;
            (0..n_layers)
                .map(|i| used == Some(true) && i >= from)
                .collect()
        }
    })
}

/// The Hugging Face name of the weight a model names `path` (its GGUF name).
pub(crate) fn weight_name(arch: Arch, path: &str) -> String {
    match path {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let Some((layer, rest)) = path.strip_prefix("blk.").and_then(|p| p.split_once('.')) else {
        return path.into();
    };
    let (name, kind) = rest.rsplit_once('.').unwrap_or((rest, "weight"));
    let hf = match name {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "post_attention_norm" => "post_attention_layernorm",
        "ffn_norm" if arch == Arch::Gemma3 => "pre_feedforward_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "post_ffw_norm" => "post_feedforward_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        other => other,
    };
    format!("model.layers.{layer}.{hf}.{kind}")
}

/// The weights of the folder `dir`: the shard index if there is one, else
/// `model.safetensors`.
pub(crate) fn open_weights(dir: &Path) -> Result<Safetensors> {
    let index = dir.join("model.safetensors.index.json");
    let path = if index.is_file() {
        index
    } else {
        dir.join("model.safetensors")
    };
    Ok(Safetensors::open(&path)?)
}

/// The end-of-sequence token of `config.json` (the first, if a list).
pub(crate) fn eos(dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
    let json: Value = serde_json::from_str(&text).ok()?;
    let eos = json.get("eos_token_id")?;
    let id = eos.as_u64().or_else(|| eos.as_array()?.first()?.as_u64())?;
    u32::try_from(id).ok()
}
