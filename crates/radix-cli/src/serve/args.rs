//! The options of `radix serve`, checked before anything is loaded.

use std::time::Duration;

use anyhow::{Result, ensure};
use clap::Args;

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
    /// the model's own context.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub context: usize,
    /// Requests to `/v1/...` must carry `Authorization: Bearer KEY`.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// After SIGTERM or Ctrl-C, how long running requests may take to finish
    /// before they are cut and the server exits.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub shutdown_timeout: f64,
}

impl ServeArgs {
    /// Refuses values that cannot work, naming the flag.
    pub fn check(&self) -> Result<()> {
        ensure!(self.max_batch >= 1, "--max-batch must be at least 1");
        ensure!(self.max_queue >= 1, "--max-queue must be at least 1");
        ensure!(
            self.context >= 32 && self.context.is_power_of_two(),
            "--context must be a power of two of at least 32, got {}",
            self.context
        );
        ensure!(
            self.api_key.as_ref().is_none_or(|k| !k.is_empty()),
            "--api-key must not be empty"
        );
        ensure!(
            self.shutdown_timeout.is_finite() && self.shutdown_timeout >= 0.0,
            "--shutdown-timeout must be 0 or more seconds, got {}",
            self.shutdown_timeout
        );
        Ok(())
    }

    /// `--shutdown-timeout` as a duration.
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.shutdown_timeout)
    }
}
