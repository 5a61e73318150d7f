//! `peft`'s adapter folders: `adapter_config.json` (the `LoraConfig`) and
//! `adapter_model.safetensors` (each tensor under [`peft_key`]'s name),
//! read by [`AdapterFolder::open`] and written by [`save_adapter`]. What
//! radix cannot apply as `peft` would (DoRA, `fan_in_fan_out`, trained
//! biases, per-layer ranks, a regular expression of targets, ...) is an
//! error naming the file and the key, never ignored.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use radix::io::{HostTensor, Safetensors};
use radix::{Buffer, Bufferized, Module};
use serde_json::{Value, json};

use radix::nn::Lora;

use super::{LoraConfig, peft_key};
use crate::transformer::Decoder;
use crate::{Error, Result};

/// The configuration file of an adapter folder.
pub const CONFIG_FILE: &str = "adapter_config.json";

/// The weights file of an adapter folder.
pub const WEIGHTS_FILE: &str = "adapter_model.safetensors";

/// A `peft` LoRA adapter folder, opened: its configuration and its
/// weights (memory-mapped).
pub struct AdapterFolder {
    config: LoraConfig,
    weights: Safetensors,
}

impl AdapterFolder {
    /// Opens the folder `dir`, reading its configuration; `Err` naming the
    /// file and the key for what radix cannot apply.
    pub fn open(dir: &Path) -> Result<AdapterFolder> {
        let path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Config {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let config = parse_config(&text).map_err(|message| Error::Config { path, message })?;
        let weights = Safetensors::open(&dir.join(WEIGHTS_FILE))?;
        Ok(AdapterFolder { config, weights })
    }

    /// The adapters' configuration.
    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    /// The weights file, a source of tensors under `peft`'s keys.
    pub fn into_weights(self) -> Safetensors {
        self.weights
    }
}

/// Whether every key of an adapter file (`keys`, of `file`) is one an
/// adapter of `model` loads: `Err` naming the file and the first that is
/// not (an adapter for a layer the model lacks, or one its targets leave
/// out).
pub(crate) fn check_all_used(model: &Decoder, keys: &[String], file: &Path) -> Result<()> {
    let arch = model.config().arch;
    let mut wanted = BTreeSet::new();
    model.visit(&mut String::new(), &mut |path, t| {
        if Lora::is_adapter(t) {
            wanted.extend(peft_key(arch, path));
        }
    });
    match keys.iter().find(|k| !wanted.contains(*k)) {
        None => Ok(()),
        Some(key) => Err(Error::Config {
            path: file.to_path_buf(),
            message: format!(
                "holds `{key}`, which no adapted layer of the model takes \
                 (its targets: {:?})",
                targets_of(&wanted)
            ),
        }),
    }
}

/// The module names the keys `keys` adapt (`q_proj`, ...), for errors.
fn targets_of(keys: &BTreeSet<String>) -> BTreeSet<String> {
    keys.iter()
        .filter_map(|k| k.rsplit('.').nth(2).map(str::to_string))
        .collect()
}

/// The configuration in `adapter_config.json`'s `text`, or what is wrong
/// with it (naming the key).
fn parse_config(text: &str) -> std::result::Result<LoraConfig, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let get = |key: &str| v.get(key).filter(|x| !x.is_null());
    match get("peft_type").and_then(Value::as_str) {
        Some("LORA") => {}
        other => return Err(format!("`peft_type` is {other:?}, not \"LORA\"")),
    }
    let rank = get("r")
        .and_then(Value::as_i64)
        .filter(|&r| r > 0)
        .ok_or("`r` is not a positive integer")?;
    let alpha = match get("lora_alpha") {
        None => 8.0,
        Some(a) => a.as_f64().ok_or("`lora_alpha` is not a number")?,
    };
    let targets = match get("target_modules") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| t.as_str().map(str::to_string))
            .collect::<Option<Vec<String>>>()
            .ok_or("`target_modules` holds a value that is not a string")?,
        Some(Value::String(re)) => {
            return Err(format!(
                "`target_modules` is the regular expression {re:?}; radix takes a list of names"
            ));
        }
        _ => return Err("`target_modules` is not a list of module names".into()),
    };
    let flag = |key: &str| get(key).and_then(Value::as_bool).unwrap_or(false);
    for key in ["use_dora", "fan_in_fan_out", "lora_bias"] {
        if flag(key) {
            return Err(format!("`{key}` is true, which radix does not apply"));
        }
    }
    if let Some(bias) = get("bias").and_then(Value::as_str)
        && bias != "none"
    {
        return Err(format!("`bias` is {bias:?}; radix applies only \"none\""));
    }
    for key in [
        "layers_to_transform",
        "modules_to_save",
        "exclude_modules",
        "layer_replication",
        "trainable_token_indices",
        "target_parameters",
    ] {
        if get(key).is_some() {
            return Err(format!("`{key}` is set, which radix does not apply"));
        }
    }
    for key in ["rank_pattern", "alpha_pattern"] {
        if get(key)
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
        {
            return Err(format!("`{key}` is not empty, which radix does not apply"));
        }
    }
    Ok(LoraConfig {
        rank,
        alpha,
        rslora: flag("use_rslora"),
        targets,
    })
}

/// Writes the adapters of `model` (their values in `weights`) to the folder
/// `dir` as `peft` saves them: `adapter_model.safetensors` under
/// [`peft_key`]'s names and `adapter_config.json` of `lora`, naming
/// `base_model` as the model adapted. Creates `dir` if needed.
pub fn save_adapter(
    dir: &Path,
    model: &Decoder,
    weights: &Bufferized<Decoder>,
    lora: &LoraConfig,
    base_model: &str,
) -> Result<()> {
    let io = |path: PathBuf| {
        move |e: std::io::Error| Error::Config {
            path,
            message: e.to_string(),
        }
    };
    std::fs::create_dir_all(dir).map_err(io(dir.to_path_buf()))?;
    let arch = model.config().arch;
    let mut paths = vec![];
    model.visit(&mut String::new(), &mut |path, t| {
        paths.push((path.to_string(), Lora::is_adapter(t)))
    });
    let buffers: Vec<&Buffer> = radix::module::leaves::<Decoder, Buffer>(weights);
    let mut tensors: Vec<(String, HostTensor)> = vec![];
    for ((path, adapter), buffer) in paths.iter().zip(buffers) {
        let Some(key) = peft_key(arch, path).filter(|_| *adapter) else {
            continue;
        };
        let values = buffer.to_vec::<f32>()?;
        tensors.push((key, HostTensor::from_slice(buffer.shape().dims(), &values)));
    }
    let named: Vec<(&str, &HostTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    radix::io::safetensors::save(&dir.join(WEIGHTS_FILE), &named, &[("format", "pt")])?;
    let config = json!({
        "peft_type": "LORA",
        "base_model_name_or_path": base_model,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "use_rslora": lora.rslora,
        "target_modules": lora.targets,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": false,
        "use_dora": false,
        "inference_mode": true,
        "task_type": "CAUSAL_LM",
    });
    let text = serde_json::to_string_pretty(&config).expect("a JSON value prints") + "\n";
    let path = dir.join(CONFIG_FILE);
    std::fs::write(&path, text).map_err(io(path.clone()))
}

#[cfg(test)]
mod tests {
    use super::parse_config;

    #[test]
    fn what_radix_cannot_apply_is_refused_by_key() {
        let ok = r#"{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}"#;
        let cfg = parse_config(ok).expect("a plain LoRA");
        assert_eq!((cfg.rank, cfg.alpha, cfg.scale()), (4, 8.0, 2.0));
        for (change, key) in [
            (r#""use_dora": true"#, "use_dora"),
            (r#""fan_in_fan_out": true"#, "fan_in_fan_out"),
            (r#""bias": "all""#, "bias"),
            (r#""layers_to_transform": [0]"#, "layers_to_transform"),
            (r#""rank_pattern": {"q_proj": 8}"#, "rank_pattern"),
            (r#""target_modules": ".*proj""#, "target_modules"),
            (r#""peft_type": "IA3""#, "peft_type"),
            (r#""r": 0"#, "`r`"),
        ] {
            // Last: of a repeated key, serde_json keeps the last value.
            let text = format!("{}, {change}}}", &ok[..ok.len() - 1]);
            let err = parse_config(&text).expect_err(&text);
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}
