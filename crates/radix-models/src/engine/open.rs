//! Opening a model file for the engine: whatever decoder a GGUF file's
//! `general.architecture` or a Hugging Face folder's `model_type` says it
//! is, with adapters or without.

use std::path::{Path, PathBuf};

use radix::Platform;
use radix::collective::{process_count, process_index};
use radix::io::{Gguf, TensorSource, WeightStore};
use radix::nn::{CacheType, MatrixFormat};

use super::Engine;
use crate::Result;
use crate::lora::peft::check_all_used;
use crate::lora::{AdapterFolder, LoraConfig, peft_key};
use crate::transformer::{Decoder, DecoderConfig, hf};

/// Where and how a decoder's weights are loaded.
struct Load<'a> {
    platform: &'a Platform,
    store: &'a WeightStore,
    capacity: usize,
    matrices: MatrixFormat,
    /// The tokens that end generation.
    stops: Vec<u32>,
    /// The adapters to put on the model, and the file they come from.
    lora: Option<(&'a LoraConfig, &'a (Vec<String>, PathBuf))>,
}

impl<'a> Load<'a> {
    /// Loading from `store` on `platform`, without adapters.
    fn new(
        platform: &'a Platform,
        store: &'a WeightStore,
        capacity: usize,
        matrices: MatrixFormat,
        stops: Vec<u32>,
    ) -> Load<'a> {
        Load {
            platform,
            store,
            capacity,
            matrices,
            stops,
            lora: None,
        }
    }

    /// The decoder of `cfg`.
    fn decoder(self, cfg: &DecoderConfig) -> Result<Engine> {
        let Load {
            platform,
            store,
            capacity,
            matrices,
            stops,
            lora,
        } = self;
        let mut model = Decoder::new(cfg);
        if let Some((lora, (keys, file))) = lora {
            model = model.with_lora(lora)?;
            check_all_used(&model, keys, file)?;
        }
        Engine::from_store(platform, model, store, capacity, matrices, stops)
    }
}

/// The configuration of the decoder at `path` (a GGUF file or a Hugging
/// Face folder), read without loading its weights.
pub fn config_of(path: &Path) -> Result<DecoderConfig> {
    if path.is_dir() {
        let weights = hf::open_weights(path)?;
        DecoderConfig::from_hf(path, &weights)
    } else {
        DecoderConfig::from_gguf(&Gguf::open(path)?)
    }
}

/// A model file or folder, opened: its configuration, its weights, how the
/// model's paths name them, and the tokens that end generation.
struct Base {
    cfg: DecoderConfig,
    source: Box<dyn TensorSource>,
    names: Box<dyn Fn(&str) -> String + Send + Sync>,
    stops: Vec<u32>,
}

/// The configuration of the model at `path` (a GGUF file or a Hugging Face
/// folder) and a store of its weights by the model's field paths, where an
/// adapter's tensor ([`peft_key`]) is looked up in `adapters` under its
/// `peft` key: how a model with adapters to train loads
/// ([`crate::lora::initial_adapters`]).
pub fn weight_store(
    path: &Path,
    adapters: Box<dyn TensorSource>,
) -> Result<(DecoderConfig, WeightStore)> {
    let base = Base::open(path)?;
    let cfg = base.cfg.clone();
    Ok((cfg, base.store_with(adapters)))
}

impl Base {
    /// A store of the base weights and the adapters' tensors of
    /// `adapters`, under their `peft` keys.
    fn store_with(self, adapters: Box<dyn TensorSource>) -> WeightStore {
        let (arch, names) = (self.cfg.arch, self.names);
        WeightStore::new(vec![self.source, adapters], move |p: &str| {
            peft_key(arch, p).unwrap_or_else(|| names(p))
        })
    }

    /// Opens `path`: a GGUF file, or a Hugging Face folder.
    fn open(path: &Path) -> Result<Base> {
        if path.is_dir() {
            let weights = hf::open_weights(path)?;
            let cfg = DecoderConfig::from_hf(path, &weights)?;
            let arch = cfg.arch;
            return Ok(Base {
                cfg,
                source: Box::new(weights),
                names: Box::new(move |p: &str| hf::weight_name(arch, p)),
                stops: hf::eos(path).into_iter().collect(),
            });
        }
        let gguf = Gguf::open(path)?;
        Ok(Base {
            cfg: DecoderConfig::from_gguf(&gguf)?,
            stops: radix_text::turn_end_ids(&gguf),
            source: Box::new(gguf),
            names: Box::new(str::to_string),
        })
    }
}

impl DecoderConfig {
    /// The bytes one sequence's key/value cache of `ty` takes per position
    /// (every layer's keys and values: 4 bytes a value in f32, 2 in f16,
    /// 34 per 32 in Q8_0).
    pub fn cache_bytes_per_position(&self, ty: CacheType) -> usize {
        let head = ty.bytes(self.head_dim.max(0) as usize);
        self.n_layers * 2 * self.n_kv_heads.max(0) as usize * head
    }
}

impl Engine {
    /// Opens the model at `path` (a GGUF file, or a Hugging Face folder with
    /// `config.json` and safetensors weights) and loads it on `platform`,
    /// its matrices as `matrices` asks, into an engine whose caches hold
    /// `capacity` positions.
    pub fn open(
        platform: &Platform,
        path: &Path,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<Engine> {
        let base = Base::open(path)?;
        let store = WeightStore::new(vec![base.source], base.names);
        Load::new(platform, &store, capacity, matrices, base.stops).decoder(&base.cfg)
    }

    /// Opens this process's share of the model at `path` for a
    /// tensor-parallel job ([`DecoderConfig::shard`]): run by every process
    /// of the job (`radix launch -n N`), each loads its heads and hidden
    /// units of every block, and each step sums the blocks' partial outputs
    /// over the processes, so every process computes the same logits. A
    /// process started alone holds the whole model.
    pub fn open_tensor_parallel(
        platform: &Platform,
        path: &Path,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<Engine> {
        let base = Base::open(path)?;
        let (rank, size) = (process_index()?, process_count()?);
        let (cfg, shard) = base.cfg.shard(rank, size)?;
        let source = shard.source(base.source, &cfg, &base.names);
        let store = WeightStore::new(vec![source], base.names);
        Load::new(platform, &store, capacity, matrices, base.stops).decoder(&cfg)
    }

    /// Opens the model at `path` as [`Engine::open`] does, with the LoRA
    /// adapters of the `peft` folder `adapter` on it
    /// ([`AdapterFolder`]). A target module the model lacks, a tensor of
    /// the wrong shape or one that no adapted layer takes is an error
    /// naming it (and the file).
    pub fn open_with_lora(
        platform: &Platform,
        path: &Path,
        adapter: &Path,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<Engine> {
        let base = Base::open(path)?;
        let folder = AdapterFolder::open(adapter)?;
        let lora = folder.config().clone();
        let weights = folder.into_weights();
        let keys = (weights.names(), weights.path().to_path_buf());
        let (cfg, stops) = (base.cfg.clone(), base.stops.clone());
        let store = base.store_with(Box::new(weights));
        let load = Load {
            lora: Some((&lora, &keys)),
            ..Load::new(platform, &store, capacity, matrices, stops)
        };
        load.decoder(&cfg)
    }
}
