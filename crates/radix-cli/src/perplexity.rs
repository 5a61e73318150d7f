//! `radix perplexity`: how well a language model predicts a text, computed
//! as llama.cpp's `llama-perplexity` computes it, so the two compare on the
//! same file and text: the text is tokenized once (with the BOS the
//! tokenizer adds), cut into chunks of `--ctx` tokens (the rest dropped),
//! each chunk's first token replaced by BOS where the vocabulary adds one,
//! each chunk run from position 0, and only the second half of each chunk
//! scored (position `j` predicting token `j + 1`, for `j` from `ctx / 2` to
//! `ctx - 2`). The perplexity is `exp` of the mean negative log-likelihood.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use radix_models::engine::Engine;

use crate::Cli;
use crate::generate::{CacheTypeArg, DtypeArg, Model, matrix_format, open_platform};

/// The options of `radix perplexity`.
#[derive(clap::Args)]
pub struct PerplexityArgs {
    /// `smollm2` (fetched on first use), a GGUF file or a Hugging Face folder.
    #[arg(long, default_value = "smollm2", value_name = "smollm2|PATH")]
    model: String,
    /// The text to score (UTF-8).
    #[arg(long, value_name = "PATH")]
    file: PathBuf,
    /// Tokens per chunk; the second half of each is scored.
    #[arg(long, default_value_t = 512, value_name = "N")]
    ctx: usize,
    /// Score at most this many chunks (default: every whole chunk).
    #[arg(long, value_name = "N")]
    chunks: Option<usize>,
    /// The form of the model's matrices (see `radix generate --dtype`).
    #[arg(long, value_enum, default_value_t = DtypeArg::Stored)]
    dtype: DtypeArg,
    /// Multiply quantized matrices by f32 activations (`W·x`) instead of
    /// 8-bit ones (see `radix generate --exact`).
    #[arg(long)]
    exact: bool,
    /// The element type of the key/value cache (see `radix generate
    /// --cache-type`).
    #[arg(long, value_enum, default_value_t = CacheTypeArg::F16)]
    cache_type: CacheTypeArg,
    /// Print one JSON object instead of the text lines.
    #[arg(long)]
    json: bool,
}

/// Runs `radix perplexity`.
pub fn run(cli: &Cli, args: &PerplexityArgs) -> Result<()> {
    ensure!(
        args.ctx >= 4,
        "--ctx {} is too short: a chunk needs at least 4 tokens",
        args.ctx
    );
    let matrices = matrix_format(args.dtype, args.exact)?;
    let model = Model::open(&args.model)?;
    ensure!(
        args.ctx <= model.context,
        "--ctx {} is longer than the model's context of {} tokens",
        args.ctx,
        model.context
    );
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {} as UTF-8 text", args.file.display()))?;
    let ids = model.tokenizer.encode(&text)?;
    // The BOS llama-perplexity puts first in every chunk: the tokenizer's,
    // where encoding adds it.
    let bos = model
        .tokenizer
        .bos_id()
        .filter(|&b| ids.first() == Some(&b) && !text.starts_with(&token_text(&model, b)));
    let whole = ids.len() / args.ctx;
    let n_chunks = args.chunks.map_or(whole, |n| n.min(whole));
    if n_chunks == 0 {
        bail!(
            "{} holds {} tokens: not one chunk of --ctx {}",
            args.file.display(),
            ids.len(),
            args.ctx
        );
    }
    let platform = open_platform(cli)?;
    let mut engine = Engine::open(&platform, &model.path, args.ctx, matrices)?
        .with_cache_type(args.cache_type.cache_type())?;
    let first = args.ctx / 2;
    let (mut sum, mut sum_sq, mut n) = (0f64, 0f64, 0usize);
    let t = Instant::now();
    for (i, chunk) in ids.chunks_exact(args.ctx).take(n_chunks).enumerate() {
        let mut chunk = chunk.to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        let nll = engine.next_token_nll(&chunk)?;
        for &v in &nll[first..] {
            let v = f64::from(v);
            ensure!(
                v.is_finite(),
                "chunk {i}: a token's likelihood is not finite"
            );
            sum += v;
            sum_sq += v * v;
            n += 1;
        }
        if !args.json {
            eprint!("[{}]{:.4},", i + 1, (sum / n as f64).exp());
        }
    }
    let mean = sum / n as f64;
    let ppl = mean.exp();
    // The standard error of the mean NLL, carried to the perplexity as
    // llama-perplexity reports it.
    let var = (sum_sq / n as f64 - mean * mean).max(0.0);
    let err = ppl * (var / (n as f64 - 1.0).max(1.0)).sqrt();
    let seconds = t.elapsed().as_secs_f64();
    if args.json {
        let report = serde_json::json!({
            "model": args.model,
            "file": args.file,
            "ctx": args.ctx,
            "chunks": n_chunks,
            "scored_tokens": n,
            "text_tokens": ids.len(),
            "dtype": clap::ValueEnum::to_possible_value(&args.dtype).map(|v| v.get_name().to_string()),
            "exact": args.exact,
            "cache_type": engine.model().cache_type().name(),
            "cache_bytes_per_position": engine.cache_bytes_per_position(),
            "perplexity": ppl,
            "perplexity_error": err,
            "seconds": seconds,
        });
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        eprintln!();
        eprintln!(
            "{n_chunks} chunks of {} tokens, {n} scored, in {seconds:.1} s",
            args.ctx
        );
        outln!("perplexity: {ppl:.4} +/- {err:.4}")?;
    }
    Ok(())
}

/// The text of token `id` (to tell a BOS the tokenizer added from one the
/// text itself holds).
fn token_text(model: &Model, id: u32) -> String {
    model.tokenizer.id_to_token(id).unwrap_or_default()
}
