//! Any decoder radix runs, picked by what a file says it is: a GGUF file's
//! `general.architecture`, a Hugging Face folder's `model_type`.

use std::path::{Path, PathBuf};

use radix::io::{Gguf, TensorSource, WeightStore};
use radix::nn::MatrixFormat;
use radix::{DType, Platform};

use crate::batch::Batch;
use crate::gemma3::Gemma3;
use crate::generate::{Cache, CausalLm, Generation, Generator, Plan};
use crate::llama::Llama;
use crate::lora::peft::check_all_used;
use crate::lora::{AdapterFolder, LoraConfig, peft_key};
use crate::prompt_cache::PromptCache;
use crate::sampling::Sampler;
use crate::transformer::{Arch, Decoder, DecoderConfig, Layer, hf};
use crate::{Error, Result};

/// A decoder on a device, ready to generate: one variant per block type
/// (LLaMA's serves Mistral and Qwen too).
pub enum Runner {
    /// LLaMA, Mistral, Qwen2, Qwen3.
    Llama(Generator<Llama>),
    /// Gemma 3.
    Gemma3(Generator<Gemma3>),
}

/// `body` with `$g` bound to the runner's generator, whatever its model.
macro_rules! each {
    ($runner:expr, $g:ident => $body:expr) => {
        match $runner {
            Runner::Llama($g) => $body,
            Runner::Gemma3($g) => $body,
        }
    };
}

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

impl Load<'_> {
    /// The decoder of `cfg` with blocks `B`.
    fn decoder<B: Layer>(self, cfg: &DecoderConfig) -> Result<Generator<Decoder<B>>> {
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
        Generator::from_store(platform, model, store, capacity, matrices, stops)
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
    /// The bytes one sequence's key/value cache takes per position (every
    /// layer's keys and values, of [`DecoderConfig::cache_dtype`]).
    pub fn cache_bytes_per_position(&self) -> usize {
        let width = (self.n_kv_heads * self.head_dim) as usize;
        self.n_layers * 2 * width * self.cache_dtype.size_in_bytes()
    }
}

impl Runner {
    /// Opens the model at `path` (a GGUF file, or a Hugging Face folder with
    /// `config.json` and safetensors weights) and loads it on `platform`,
    /// its matrices as `matrices` asks, into a runner whose cache holds
    /// `capacity` positions.
    pub fn open(
        platform: &Platform,
        path: &Path,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<Runner> {
        let base = Base::open(path)?;
        let store = WeightStore::new(vec![base.source], base.names);
        let load = Load {
            platform,
            store: &store,
            capacity,
            matrices,
            stops: base.stops,
            lora: None,
        };
        Runner::load(&base.cfg, load)
    }

    /// Opens the Hugging Face folder `dir`.
    pub fn open_hf(
        platform: &Platform,
        dir: &Path,
        capacity: usize,
        matrices: MatrixFormat,
    ) -> Result<Runner> {
        Runner::open(platform, dir, capacity, matrices)
    }

    /// Opens the model at `path` as [`Runner::open`] does, with the LoRA
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
    ) -> Result<Runner> {
        let base = Base::open(path)?;
        let folder = AdapterFolder::open(adapter)?;
        let lora = folder.config().clone();
        let weights = folder.into_weights();
        let keys = (weights.names(), weights.path().to_path_buf());
        let (cfg, stops) = (base.cfg.clone(), base.stops.clone());
        let store = base.store_with(Box::new(weights));
        let load = Load {
            platform,
            store: &store,
            capacity,
            matrices,
            stops,
            lora: Some((&lora, &keys)),
        };
        Runner::load(&cfg, load)
    }

    /// The decoder `cfg` describes, loaded as `load` says, with the block
    /// type its architecture uses.
    fn load(cfg: &DecoderConfig, load: Load) -> Result<Runner> {
        Ok(match cfg.arch {
            Arch::Gemma3 => Runner::Gemma3(load.decoder(cfg)?),
            Arch::Llama | Arch::Mistral | Arch::Qwen2 | Arch::Qwen3 => {
                Runner::Llama(load.decoder(cfg)?)
            }
        })
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &DecoderConfig {
        each!(self, g => g.model().config())
    }

    /// The same runner with its steps run as `plan`.
    pub fn with_plan(self, plan: Plan) -> Runner {
        match self {
            Runner::Llama(g) => Runner::Llama(g.with_plan(plan)),
            Runner::Gemma3(g) => Runner::Gemma3(g.with_plan(plan)),
        }
    }

    /// The same runner with a key/value cache of `dtype` (f32 or f16; its
    /// steps compiled anew on first use). An f16 cache takes half the
    /// memory; the kernels read it as f32.
    pub fn with_cache_dtype(self, dtype: DType) -> Result<Runner> {
        if !matches!(dtype, DType::F32 | DType::F16) {
            return Err(Error::Input(format!(
                "a key/value cache of {dtype}: radix keeps caches in f32 or f16"
            )));
        }
        Ok(match self {
            Runner::Llama(g) => Runner::Llama(g.map_model(|m| m.with_cache_dtype(dtype))),
            Runner::Gemma3(g) => Runner::Gemma3(g.map_model(|m| m.with_cache_dtype(dtype))),
        })
    }

    /// See [`Generator::capacity`].
    pub fn capacity(&self) -> usize {
        each!(self, g => g.capacity())
    }

    /// See [`Generator::stop_ids`].
    pub fn stop_ids(&self) -> &[u32] {
        each!(self, g => g.stop_ids())
    }

    /// See [`Generator::compile`].
    pub fn compile(&mut self, n: usize) -> Result<()> {
        each!(self, g => g.compile(n))
    }

    /// See [`Generator::release`].
    pub fn release(&mut self, n: usize) -> Result<()> {
        each!(self, g => g.release(n))
    }

    /// See [`Generator::prefill`].
    pub fn prefill(&mut self, ids: &[u32]) -> Result<(Vec<f32>, Cache)> {
        each!(self, g => g.prefill(ids))
    }

    /// See [`Generator::empty_cache`].
    pub fn empty_cache(&mut self) -> Result<Cache> {
        each!(self, g => g.empty_cache())
    }

    /// See [`Generator::extend`].
    pub fn extend(&mut self, ids: &[u32], cache: &mut Cache) -> Result<Vec<f32>> {
        each!(self, g => g.extend(ids, cache))
    }

    /// An empty [`PromptCache`] for this runner's sequences, of at most
    /// `budget` bytes.
    pub fn prompt_cache(&self, budget: usize) -> PromptCache {
        each!(self, g => {
            let shapes = g.model().cache_shapes(g.capacity());
            PromptCache::new(g.platform(), shapes, budget)
        })
    }

    /// See [`Generator::next_token_nll`].
    pub fn next_token_nll(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        each!(self, g => g.next_token_nll(ids))
    }

    /// See [`Generator::decode`].
    pub fn decode(&mut self, token: u32, cache: &mut Cache) -> Result<Vec<f32>> {
        each!(self, g => g.decode(token, cache))
    }

    /// See [`Generator::generate_with`].
    pub fn generate_with<E: From<crate::Error>>(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        mut pick: impl FnMut(&[f32]) -> Option<u32>,
        on_token: impl FnMut(u32) -> Result<bool, E>,
    ) -> Result<Generation, E> {
        each!(self, g => g.generate_with(prompt, max_tokens, &mut pick, on_token))
    }

    /// A batch of up to `slots` sequences of this runner's model (see
    /// [`Batch::new`]): the decode step of each bucket is compiled here.
    pub fn batch(&self, slots: usize) -> Result<RunnerBatch> {
        Ok(match self {
            Runner::Llama(g) => RunnerBatch::Llama(Batch::new(g, slots)?),
            Runner::Gemma3(g) => RunnerBatch::Gemma3(Batch::new(g, slots)?),
        })
    }

    /// See [`Generator::generate`].
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampler: &mut Sampler,
    ) -> Result<Vec<u32>> {
        each!(self, g => g.generate(prompt, max_tokens, sampler))
    }

    /// See [`Generator::generate_without_cache`].
    pub fn generate_without_cache(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampler: &mut Sampler,
    ) -> Result<Vec<u32>> {
        each!(self, g => g.generate_without_cache(prompt, max_tokens, sampler))
    }
}

/// Continuous batching ([`Batch`]) of whatever decoder a [`Runner`] holds,
/// made by [`Runner::batch`] and stepped with the same runner.
pub enum RunnerBatch {
    /// Of a [`Runner::Llama`].
    Llama(Batch<Llama>),
    /// Of a [`Runner::Gemma3`].
    Gemma3(Batch<Gemma3>),
}

/// `body` with `$b` bound to the batch, whatever its model.
macro_rules! each_batch {
    ($batch:expr, $b:ident => $body:expr) => {
        match $batch {
            RunnerBatch::Llama($b) => $body,
            RunnerBatch::Gemma3($b) => $body,
        }
    };
}

impl RunnerBatch {
    /// See [`Batch::buckets`].
    pub fn buckets(&self) -> &[usize] {
        each_batch!(self, b => b.buckets())
    }

    /// See [`Batch::len`].
    pub fn len(&self) -> usize {
        each_batch!(self, b => b.len())
    }

    /// See [`Batch::is_empty`].
    pub fn is_empty(&self) -> bool {
        each_batch!(self, b => b.is_empty())
    }

    /// See [`Batch::is_full`].
    pub fn is_full(&self) -> bool {
        each_batch!(self, b => b.is_full())
    }

    /// See [`Batch::insert`]: `cache` comes from [`Runner::prefill`].
    pub fn insert(&mut self, cache: Cache) -> Result<usize> {
        each_batch!(self, b => b.insert(cache))
    }

    /// See [`Batch::remove`].
    pub fn remove(&mut self, row: usize) -> Result<()> {
        each_batch!(self, b => b.remove(row))
    }

    /// See [`Batch::row_cache`].
    pub fn row_cache(&self, row: usize) -> Result<Cache> {
        each_batch!(self, b => b.row_cache(row))
    }

    /// See [`Batch::step`]; `runner` is the one that made the batch.
    pub fn step(&mut self, runner: &mut Runner, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let rows: Vec<&[u32]> = tokens.iter().map(std::slice::from_ref).collect();
        self.extend(runner, &rows)
    }

    /// See [`Batch::extend`]; `runner` is the one that made the batch.
    pub fn extend(&mut self, runner: &mut Runner, rows: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        match (self, runner) {
            (RunnerBatch::Llama(b), Runner::Llama(g)) => b.extend(g, rows),
            (RunnerBatch::Gemma3(b), Runner::Gemma3(g)) => b.extend(g, rows),
            _ => Err(Error::Input(
                "a batch stepped with the runner of another architecture".into(),
            )),
        }
    }
}
