//! `radix embed`: sentence embeddings from a BERT model (all-MiniLM-L6-v2 by
//! default), printed as a table of pairwise cosine similarities or as JSON.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use clap::Args;
use radix::Platform;
use radix_models::bert::{Embedder, EmbedderConfig};
use serde_json::json;

use crate::Cli;
use crate::generate::{open_platform, spinner};

/// The options of `radix embed`.
#[derive(Args)]
pub struct EmbedArgs {
    /// The texts to embed.
    #[arg(value_name = "TEXT")]
    texts: Vec<String>,
    /// `minilm` (all-MiniLM-L6-v2, fetched on first use) or a folder with
    /// `config.json`, `model.safetensors` and `tokenizer.json`.
    #[arg(long, default_value = "minilm", value_name = "minilm|PATH")]
    model: String,
    /// Print one JSON object (token ids and embeddings) instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs `radix embed`.
pub fn run(cli: &Cli, args: &EmbedArgs) -> Result<()> {
    ensure!(!args.texts.is_empty(), "no text to embed: give one or more");
    let platform = open_platform(cli)?;
    let dir = model_dir(&args.model)?;
    let bar = spinner(format!("loading {}", dir.display()));
    let mut embedder = open_embedder(&platform, &dir)?;
    let texts: Vec<&str> = args.texts.iter().map(String::as_str).collect();
    let mut ids = Vec::with_capacity(texts.len());
    for t in &texts {
        ids.push(embedder.tokenize(t)?);
    }
    let embeddings = embedder.embed(&texts)?;
    bar.finish_and_clear();
    if args.json {
        let out = json!({
            "model": args.model,
            "dim": embedder.config().hidden_size,
            "ids": ids,
            "embeddings": embeddings,
        });
        outln!("{}", serde_json::to_string(&out)?)?;
        return Ok(());
    }
    out!("{}", cosine_table(&texts, &embeddings))?;
    Ok(())
}

/// The embedder of the model in `dir` (see [`model_dir`]) on `platform`:
/// what `radix embed` and `radix serve` both embed with.
pub fn open_embedder(platform: &Platform, dir: &Path) -> Result<Embedder> {
    Embedder::new(platform, dir, EmbedderConfig::minilm())
        .with_context(|| format!("cannot load the model in {}", dir.display()))
}

/// The folder of model `name`: `minilm` (fetched on first use) or a path.
pub fn model_dir(name: &str) -> Result<PathBuf> {
    if name == "minilm" {
        return Ok(radix_models::packages::minilm_dir()?);
    }
    let dir = PathBuf::from(name);
    if !dir.exists() {
        if dir.components().count() == 1 && dir.extension().is_none() {
            bail!("unknown model {name:?}: the built-in model is minilm, or give a model folder");
        }
        bail!("model folder {} not found", dir.display());
    }
    let missing: Vec<&str> = ["config.json", "model.safetensors", "tokenizer.json"]
        .into_iter()
        .filter(|f| !dir.join(f).is_file())
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} is not a model folder: it has no {}",
            dir.display(),
            missing.join(", ")
        );
    }
    Ok(dir)
}

/// The texts, numbered, then their cosine similarities (the embeddings are
/// unit vectors, so a dot product).
fn cosine_table(texts: &[&str], embeddings: &[Vec<f32>]) -> String {
    let mut out = String::new();
    for (i, t) in texts.iter().enumerate() {
        out.push_str(&format!("[{i}] {t}\n"));
    }
    out.push_str("\ncosine similarity\n    ");
    for j in 0..texts.len() {
        out.push_str(&format!("{:>8}", format!("[{j}]")));
    }
    out.push('\n');
    for (i, a) in embeddings.iter().enumerate() {
        out.push_str(&format!("{:<4}", format!("[{i}]")));
        for b in embeddings {
            let cos: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            out.push_str(&format!("{cos:>8.4}"));
        }
        out.push('\n');
    }
    out
}
