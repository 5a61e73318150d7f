//! How a sentence-transformers folder turns token states into one sentence
//! vector: `modules.json` lists the modules (Transformer, Pooling, and
//! Normalize when the vectors are scaled to unit length) and the Pooling
//! module's `config.json` names the mode. Upstream:
//! `sentence_transformers/models/Pooling.py`.

use std::path::{Path, PathBuf};

use radix::{DType, Tensor};
use serde::Deserialize;

use crate::{Error, Result};

/// How token states `(b, s, d)` become sentence vectors `(b, d)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pooling {
    /// What is taken over the sequence.
    pub mode: PoolingMode,
    /// Whether the vectors are then scaled to unit L2 norm.
    pub normalize: bool,
}

/// A sentence-transformers pooling mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolingMode {
    /// The first token's state (`[CLS]`).
    Cls,
    /// The mean over the valid tokens.
    Mean,
    /// The largest value per feature over the valid tokens.
    Max,
    /// The sum over the valid tokens divided by the square root of their
    /// count.
    MeanSqrtLen,
}

/// One entry of `modules.json`.
#[derive(Deserialize)]
struct ModuleEntry {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

/// The Pooling module's `config.json` (the modes radix knows; a mode it
/// does not know, set to true, is refused by name).
#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(flatten)]
    flags: std::collections::BTreeMap<String, serde_json::Value>,
}

impl Pooling {
    /// Mean over the valid tokens, then unit length: all-MiniLM-L6-v2's.
    pub const MEAN_NORMALIZED: Pooling = Pooling {
        mode: PoolingMode::Mean,
        normalize: true,
    };

    /// The pooling of the sentence-transformers folder `dir`. Without a
    /// `modules.json` (a plain transformers folder) this is what
    /// sentence-transformers does with such a folder: mean, not normalized.
    /// A module radix does not run (a `Dense` projection, say), a mode it
    /// does not know, or several modes at once are errors naming the file.
    pub fn from_dir(dir: &Path) -> Result<Pooling> {
        let modules_path = dir.join("modules.json");
        let text = match std::fs::read_to_string(&modules_path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Pooling {
                    mode: PoolingMode::Mean,
                    normalize: false,
                });
            }
            Err(e) => return Err(config_error(&modules_path, e.to_string())),
        };
        let modules: Vec<ModuleEntry> =
            serde_json::from_str(&text).map_err(|e| config_error(&modules_path, e.to_string()))?;
        let (mut pooling_dir, mut normalize) = (None, false);
        for m in &modules {
            match m.kind.rsplit('.').next().unwrap_or("") {
                "Transformer" => {}
                "Pooling" => pooling_dir = Some(dir.join(&m.path)),
                "Normalize" => normalize = true,
                _ => {
                    return Err(config_error(
                        &modules_path,
                        format!(
                            "module {} is not one radix runs (Transformer, Pooling, Normalize)",
                            m.kind
                        ),
                    ));
                }
            }
        }
        let mode = match pooling_dir {
            Some(p) => mode_of(&p.join("config.json"))?,
            // No Pooling module: sentence-transformers adds a mean pooling.
            None => PoolingMode::Mean,
        };
        Ok(Pooling { mode, normalize })
    }

    /// Sentence vectors `(b, d)` from states `h` `(b, s, d)` and `valid`
    /// `(b, s)` (1 for tokens, 0 for padding).
    #[track_caller]
    pub fn apply(self, h: Tensor, valid: Tensor) -> Tensor {
        let mask = valid.broadcast(h.shape());
        let count = || valid.sum("s").maximum(Tensor::scalar(1e-9, DType::F32));
        let pooled = match self.mode {
            PoolingMode::Cls => h.slice("s", 0..1).squeeze("s"),
            PoolingMode::Mean => {
                let summed = (h * mask).sum("s");
                summed / count().broadcast(summed.shape())
            }
            PoolingMode::MeanSqrtLen => {
                let summed = (h * mask).sum("s");
                summed / count().sqrt().broadcast(summed.shape())
            }
            PoolingMode::Max => {
                // Padding is set far below any state, as sentence-transformers does.
                let floor = Tensor::scalar(-1e9, DType::F32).broadcast(h.shape());
                mask.gt(Tensor::scalar(0.0, DType::F32).broadcast(h.shape()))
                    .select(h, floor)
                    .max("s")
            }
        };
        if self.normalize {
            l2_normalize(pooled, "d")
        } else {
            pooled
        }
    }
}

/// The one mode set in the Pooling module's `config.json` at `path`.
fn mode_of(path: &Path) -> Result<PoolingMode> {
    let text = std::fs::read_to_string(path).map_err(|e| config_error(path, e.to_string()))?;
    let config: PoolingConfig =
        serde_json::from_str(&text).map_err(|e| config_error(path, e.to_string()))?;
    let on: Vec<&str> = config
        .flags
        .iter()
        .filter(|(k, v)| k.starts_with("pooling_mode") && v.as_bool() == Some(true))
        .map(|(k, _)| k.as_str())
        .collect();
    let [flag] = on.as_slice() else {
        return Err(config_error(
            path,
            format!("radix pools with exactly one mode, this file sets {on:?}"),
        ));
    };
    match *flag {
        "pooling_mode_cls_token" => Ok(PoolingMode::Cls),
        "pooling_mode_mean_tokens" => Ok(PoolingMode::Mean),
        "pooling_mode_max_tokens" => Ok(PoolingMode::Max),
        "pooling_mode_mean_sqrt_len_tokens" => Ok(PoolingMode::MeanSqrtLen),
        other => Err(config_error(
            path,
            format!(
                "{other} is not a pooling radix knows (cls_token, mean_tokens, max_tokens, \
                 mean_sqrt_len_tokens)"
            ),
        )),
    }
}

fn config_error(path: &Path, message: String) -> Error {
    Error::Config {
        path: PathBuf::from(path),
        message,
    }
}

/// `x / max(|x|, 1e-12)` along `axis` (as `torch.nn.functional.normalize`).
#[track_caller]
fn l2_normalize(x: Tensor, axis: &str) -> Tensor {
    let norm = (x * x)
        .sum(axis)
        .sqrt()
        .maximum(Tensor::scalar(1e-12, x.dtype()));
    x / norm.broadcast(x.shape())
}
