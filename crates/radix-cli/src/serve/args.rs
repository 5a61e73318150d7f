//! The options of `radix serve`, checked before anything is loaded.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clap::Args;

use crate::generate::CacheTypeArg;

/// The options of `radix serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// The language model: `smollm2` (SmolLM2-135M-Instruct, fetched on
    /// first use), a GGUF file or a Hugging Face folder of any architecture
    /// `radix generate` runs (LLaMA, Mistral, Qwen2, Qwen3, Gemma 3).
    /// Requests name it by this string.
    #[arg(long, default_value = "smollm2", value_name = "smollm2|PATH")]
    pub model: String,
    /// The embedding model: `minilm` (all-MiniLM-L6-v2), a model folder, or
    /// `none` (no `/v1/embeddings`).
    #[arg(long, default_value = "minilm", value_name = "minilm|PATH|none")]
    pub embed_model: String,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port to listen on; 0 picks a free one (printed on stdout).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// How many sequences generate at once (each holds a cache of
    /// `--context` positions).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub max_batch: usize,
    /// How many requests may wait for a free sequence; more are answered
    /// 429 with `Retry-After`.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub max_queue: usize,
    /// Positions per sequence (prompt and reply), a power of two from 32 to
    /// the model's own context. Default: the model's trained context, or
    /// the largest power of two whose caches for `--max-batch` sequences
    /// fit `--cache-memory`, whichever is less.
    #[arg(long, value_name = "N")]
    pub context: Option<usize>,
    /// The memory the key/value caches of all sequences may take, in MiB,
    /// when `--context` is not given.
    #[arg(long, default_value_t = 512, value_name = "MIB")]
    pub cache_memory: u64,
    /// The memory the prompt cache may take, in MiB (0: no prompt cache).
    /// It keeps the keys and values of prompts already run, so that a
    /// prompt starting with the same tokens (a system prompt, a tool list,
    /// a chat's earlier turns) runs only the tokens after them; the least
    /// recently used prompts make room for new ones.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    pub cache_ram: u64,
    /// The most prompt tokens run between two decode steps while sequences
    /// generate: a longer prompt runs over several steps, so that it does
    /// not stall the streams already running (with nothing generating, a
    /// prompt runs whole).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub prefill_chunk: usize,
    /// Multiply quantized matrices by f32 activations (`W·x`) rather than by
    /// activations quantized to 8 bits as llama.cpp does (see `radix
    /// generate --exact`).
    #[arg(long)]
    pub exact: bool,
    /// How the key/value caches and the prompt cache's entries store keys
    /// and values (see `radix generate --cache-type`): f16 holds twice the
    /// positions of f32 in the same memory, q8_0 about four times.
    #[arg(long, value_enum, default_value_t = CacheTypeArg::F16)]
    pub cache_type: CacheTypeArg,
    /// Requests to `/v1/...` must carry `Authorization: Bearer KEY`. A key
    /// on the command line is visible to every user of the machine: prefer
    /// `--api-key-file` or the `RADIX_API_KEY` environment variable.
    #[arg(long, value_name = "KEY", conflicts_with = "api_key_file")]
    pub api_key: Option<String>,
    /// Reads the API key from the first line of this file.
    #[arg(long, value_name = "PATH")]
    pub api_key_file: Option<PathBuf>,
    /// After SIGTERM or Ctrl-C, how long running requests may take to finish
    /// before they are cut and the server exits.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub shutdown_timeout: f64,
    /// The longest a request may take, from its arrival to its last token
    /// (a whole answer past it is 504; a stream ends with an error).
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    pub request_timeout: f64,
    /// How long a client may take to send a request's headers or its body,
    /// and how long an idle connection is kept open.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub read_timeout: f64,
    /// `/health` answers 503 when the generation thread has not finished a
    /// turn of its loop (one decode step, and the prefills before it) for
    /// this long.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub health_timeout: f64,
    /// Connections served at once; more wait to be accepted. Lowered to
    /// what the open-file limit leaves.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub max_connections: usize,
}

/// The longest any timeout may be: a day.
const LONGEST: f64 = 86_400.0;

impl ServeArgs {
    /// Refuses values that cannot work, naming the flag.
    pub fn check(&self) -> Result<()> {
        ensure!(self.max_batch >= 1, "--max-batch must be at least 1");
        ensure!(self.max_queue >= 1, "--max-queue must be at least 1");
        if let Some(context) = self.context {
            ensure!(
                context >= 32 && context.is_power_of_two(),
                "--context must be a power of two of at least 32, got {context}"
            );
        }
        ensure!(
            (1..=1 << 30).contains(&self.cache_memory),
            "--cache-memory must be from 1 to 2^30 MiB, got {}",
            self.cache_memory
        );
        ensure!(
            self.cache_ram <= 1 << 30,
            "--cache-ram must be from 0 to 2^30 MiB, got {}",
            self.cache_ram
        );
        ensure!(
            self.prefill_chunk >= 1,
            "--prefill-chunk must be at least 1"
        );
        ensure!(
            self.api_key.as_ref().is_none_or(|k| !k.is_empty()),
            "--api-key must not be empty"
        );
        ensure!(
            self.max_connections >= 1,
            "--max-connections must be at least 1"
        );
        for (flag, secs, least) in [
            ("--shutdown-timeout", self.shutdown_timeout, 0.0),
            ("--request-timeout", self.request_timeout, 0.001),
            ("--read-timeout", self.read_timeout, 0.001),
            ("--health-timeout", self.health_timeout, 0.001),
        ] {
            ensure!(
                (least..=LONGEST).contains(&secs),
                "{flag} must be from {least} to {LONGEST} seconds, got {secs}"
            );
        }
        Ok(())
    }

    /// The API key: `--api-key`, the first line of `--api-key-file`, or
    /// `RADIX_API_KEY` (none if unset or empty).
    pub fn api_key(&self) -> Result<Option<String>> {
        if let Some(key) = &self.api_key {
            return Ok(Some(key.clone()));
        }
        if let Some(path) = &self.api_key_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --api-key-file {}", path.display()))?;
            let key = text.lines().next().unwrap_or("").trim();
            ensure!(
                !key.is_empty(),
                "--api-key-file {} holds no key on its first line",
                path.display()
            );
            return Ok(Some(key.to_string()));
        }
        Ok(std::env::var("RADIX_API_KEY")
            .ok()
            .filter(|k| !k.is_empty()))
    }

    /// The positions per sequence: `--context`, or the model's trained
    /// `trained` positions capped so that `--max-batch` caches of
    /// `bytes_per_position` each fit `--cache-memory`.
    pub fn context(&self, trained: usize, bytes_per_position: usize) -> Result<usize> {
        if let Some(context) = self.context {
            return Ok(context);
        }
        let budget = self.cache_memory.saturating_mul(1 << 20);
        let per_slot = budget / (self.max_batch as u64).max(1);
        let fits = per_slot / (bytes_per_position as u64).max(1);
        let mut context = 32usize;
        while context * 2 <= trained && ((context * 2) as u64) <= fits {
            context *= 2;
        }
        ensure!(
            (context as u64) <= fits,
            "--cache-memory {} MiB holds fewer than 32 positions for each of --max-batch {} \
             sequences: raise it or lower --max-batch",
            self.cache_memory,
            self.max_batch
        );
        Ok(context)
    }

    /// `--shutdown-timeout` as a duration.
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.shutdown_timeout)
    }

    /// `--request-timeout` as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.request_timeout)
    }

    /// `--read-timeout` as a duration.
    pub fn read_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.read_timeout)
    }

    /// `--health-timeout` as a duration.
    pub fn health_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.health_timeout)
    }
}
