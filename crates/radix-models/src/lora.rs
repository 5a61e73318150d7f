//! LoRA adapters on a decoder (Hu et al. 2021,
//! <https://arxiv.org/abs/2106.09685>; upstream code: Hugging Face `peft`,
//! `peft/tuners/lora/`): [`LoraConfig`] names the rank, the scale and the
//! target modules as `peft`'s `adapter_config.json` does,
//! [`Decoder::with_lora`] puts a [`radix::nn::Lora`] on each targeted
//! linear layer, and [`peft_key`] is the name `peft` saves each adapter
//! tensor under (`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`).
//!
//! `lora/peft.rs` reads and writes `peft`'s adapter folders,
//! `lora/train.rs` trains the adapters alone, the base weights (kept in
//! whatever form they were loaded, quantized ones quantized) passed to the
//! step as constants.

use std::path::Path;

use radix::Module;
use radix::io::{HostTensor, TensorSource};
use radix::nn::Lora;

use crate::sampling::Rng;
use crate::transformer::{Arch, Decoder, hf};
use crate::{Error, Result};

pub(crate) mod peft;
mod train;

pub use peft::{AdapterFolder, save_adapter};
pub use train::LoraTrainer;

/// The adapters of a model: their rank, how their term is scaled, and the
/// modules they go on (`peft`'s `LoraConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    /// The rank `r`.
    pub rank: i64,
    /// `lora_alpha`.
    pub alpha: f64,
    /// `use_rslora`: the term scaled by `alpha / sqrt(r)` instead of
    /// `alpha / r`.
    pub rslora: bool,
    /// `target_modules`: module names as Hugging Face's checkpoints call
    /// them (`q_proj`, `down_proj`); a module is targeted when its name is
    /// one of them or ends with `.` and one of them.
    pub targets: Vec<String>,
}

impl LoraConfig {
    /// Adapters of rank `rank` scaled by `alpha / rank` on every projection
    /// of a llama-like block: attention's `q_proj`, `k_proj`, `v_proj` and
    /// `o_proj`, the MLP's `gate_proj`, `up_proj` and `down_proj`.
    pub fn every_projection(rank: i64, alpha: f64) -> LoraConfig {
        let targets = [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ];
        LoraConfig {
            rank,
            alpha,
            rslora: false,
            targets: targets.map(String::from).to_vec(),
        }
    }

    /// What each adapter's `B (A x)` is multiplied by.
    pub fn scale(&self) -> f64 {
        if self.rslora {
            self.alpha / (self.rank as f64).sqrt()
        } else {
            self.alpha / self.rank as f64
        }
    }
}

/// The suffixes of an adapter's tensors' paths (and `peft`'s keys).
const SUFFIXES: [&str; 2] = [".lora_A.weight", ".lora_B.weight"];

impl Decoder {
    /// The same decoder with an adapter of `lora` on every linear layer of
    /// its blocks that `lora.targets` names (the embedding and the output
    /// head are never targeted). A target that names no layer of the model
    /// is an error naming it.
    pub fn with_lora(mut self, lora: &LoraConfig) -> Result<Self> {
        if lora.rank <= 0 {
            return Err(Error::Input(format!("a LoRA rank of {}", lora.rank)));
        }
        let arch = self.config().arch;
        let mut used = vec![false; lora.targets.len()];
        for (i, block) in self.blocks_mut().iter_mut().enumerate() {
            for (name, linear) in block.linears_mut() {
                let module = module_name(arch, &format!("blk.{i}.{name}"));
                let hit = lora
                    .targets
                    .iter()
                    .position(|t| module == *t || module.ends_with(&format!(".{t}")));
                if let Some(k) = hit {
                    used[k] = true;
                    *linear = linear.clone().with_lora(lora.rank, lora.scale());
                }
            }
        }
        let unknown: Vec<&str> = (lora.targets.iter().zip(&used))
            .filter(|(_, used)| !**used)
            .map(|(t, _)| t.as_str())
            .collect();
        if !unknown.is_empty() {
            return Err(Error::Input(format!(
                "LoRA target modules {unknown:?} name no linear layer of this {} model's blocks \
                 (they have q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                arch.model_type()
            )));
        }
        Ok(self)
    }
}

/// The Hugging Face name of the module whose weight radix calls
/// `{path}.weight` (`blk.0.attn_q` → `model.layers.0.self_attn.q_proj`).
fn module_name(arch: Arch, path: &str) -> String {
    let hf = hf::weight_name(arch, &format!("{path}.weight"));
    match hf.strip_suffix(".weight") {
        Some(m) => m.to_string(),
        None => hf,
    }
}

/// The key `peft` stores the adapter tensor at model path `path` under
/// (`blk.0.attn_q.lora_A.weight` →
/// `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`), or
/// `None` if `path` is not an adapter's.
pub fn peft_key(arch: Arch, path: &str) -> Option<String> {
    SUFFIXES.iter().find_map(|suffix| {
        let layer = path.strip_suffix(suffix)?;
        Some(format!(
            "base_model.model.{}{suffix}",
            module_name(arch, layer)
        ))
    })
}

/// Fresh adapters for every [`Lora`] of `model`, as `peft` starts them: `A`
/// uniform in `±1 / sqrt(in)` (PyTorch's Kaiming-uniform with `a = √5`),
/// `B` zero, so that the adapted model starts as the base. A source of
/// tensors under their `peft` keys, to load beside the base weights
/// ([`crate::engine::weight_store`]).
pub fn initial_adapters(model: &Decoder, rng: &mut Rng) -> InitialAdapters {
    let arch = model.config().arch;
    let mut tensors = vec![];
    model.visit(&mut String::new(), &mut |path, t| {
        let Some(key) = peft_key(arch, path).filter(|_| Lora::is_adapter(t)) else {
            return;
        };
        let s = t.shape();
        let dims = s.dims().to_vec();
        let values: Vec<f32> = if path.ends_with(SUFFIXES[0]) {
            let bound = 1.0 / (dims[1] as f64).sqrt();
            (0..s.count())
                .map(|_| ((rng.next_f64() * 2.0 - 1.0) * bound) as f32)
                .collect()
        } else {
            vec![0.0; s.count()]
        };
        tensors.push((key, HostTensor::from_slice(&dims, &values)));
    });
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    InitialAdapters { tensors }
}

/// The tensors [`initial_adapters`] drew, by `peft` key.
pub struct InitialAdapters {
    tensors: Vec<(String, HostTensor)>,
}

/// What [`InitialAdapters`] calls its file in errors.
const INITIAL: &str = "<initial LoRA adapters>";

impl TensorSource for InitialAdapters {
    fn path(&self) -> &Path {
        Path::new(INITIAL)
    }

    fn names(&self) -> Vec<String> {
        self.tensors.iter().map(|t| t.0.clone()).collect()
    }

    fn dims(&self, name: &str) -> Option<Vec<i64>> {
        self.find(name).map(|t| t.dims().to_vec())
    }

    fn tensor(&self, name: &str) -> radix::io::Result<Option<HostTensor>> {
        Ok(self.find(name).cloned())
    }
}

impl InitialAdapters {
    fn find(&self, name: &str) -> Option<&HostTensor> {
        let at = self.tensors.binary_search_by(|t| t.0.as_str().cmp(name));
        at.ok().map(|i| &self.tensors[i].1)
    }
}
