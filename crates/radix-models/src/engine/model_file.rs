//! A model file read but not loaded: what a program needs before it loads
//! the weights (to tokenize and template a prompt, and to size a context
//! and a cache), from a GGUF file or a Hugging Face folder alike, so that
//! no program reads either format's metadata itself.

use std::path::{Path, PathBuf};

use radix::io::Gguf;
use radix_text::Tokenizer;

use crate::transformer::{DecoderConfig, hf};
use crate::{Error, Result};

/// A GGUF file or a Hugging Face folder's configuration, tokenizer and
/// trained context, checked; [`Engine::open`](super::Engine::open) loads
/// its weights.
pub struct ModelFile {
    path: PathBuf,
    config: DecoderConfig,
    tokenizer: Tokenizer,
    context: usize,
}

impl ModelFile {
    /// Reads the GGUF file or Hugging Face folder at `path`: an error names
    /// the file and what it lacks (an unknown architecture, no context
    /// length, no tokenizer).
    pub fn open(path: &Path) -> Result<ModelFile> {
        let (config, tokenizer, context) = if path.is_dir() {
            read_folder(path)?
        } else {
            read_gguf(path)?
        };
        Ok(ModelFile {
            path: path.to_path_buf(),
            config,
            tokenizer,
            context,
        })
    }

    /// The GGUF file or Hugging Face folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The decoder's configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// The model's tokenizer (and chat template).
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The longest sequence the model was trained on
    /// (`<arch>.context_length`, `max_position_embeddings`).
    pub fn context(&self) -> usize {
        self.context
    }
}

/// A GGUF file's configuration, tokenizer and `<arch>.context_length`.
fn read_gguf(path: &Path) -> Result<(DecoderConfig, Tokenizer, usize)> {
    let bad = |message: String| Error::Config {
        path: path.to_path_buf(),
        message,
    };
    let gguf = Gguf::open(path)?;
    // The tokenizer first: its errors are the ones a file that holds only
    // a vocabulary (a tokenizer's own GGUF) should get.
    let tokenizer = Tokenizer::from_gguf(&gguf)?;
    let config = DecoderConfig::from_gguf(&gguf)?;
    // The file's own name for its architecture (checked by `from_gguf`).
    let arch = gguf.get("general.architecture").and_then(|v| v.as_str());
    let key = format!("{}.context_length", arch.unwrap_or_default());
    let context = match gguf.get(&key).and_then(|v| v.as_i64()) {
        Some(n) if n > 0 => n as usize,
        _ => return Err(bad(format!("no {key} metadata"))),
    };
    Ok((config, tokenizer, context))
}

/// A Hugging Face folder's configuration, tokenizer (`tokenizer.json`) and
/// `max_position_embeddings` (of `config.json`).
fn read_folder(dir: &Path) -> Result<(DecoderConfig, Tokenizer, usize)> {
    let config_json = dir.join("config.json");
    if !config_json.is_file() {
        return Err(Error::Config {
            path: dir.to_path_buf(),
            message: "is a folder without config.json, not a Hugging Face model".into(),
        });
    }
    let config = DecoderConfig::from_hf(dir, &hf::open_weights(dir)?)?;
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
    let bad = |message: String| Error::Config {
        path: config_json.clone(),
        message,
    };
    let text =
        std::fs::read_to_string(&config_json).map_err(|e| bad(format!("cannot read: {e}")))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let context = match json.get("max_position_embeddings").and_then(|v| v.as_u64()) {
        Some(n) if n > 0 => n as usize,
        _ => return Err(bad("no max_position_embeddings".into())),
    };
    Ok((config, tokenizer, context))
}
