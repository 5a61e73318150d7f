//! `radix generate` picks the architecture a file names: the tiny random
//! models of `radix-models/tests/fixtures/tiny` (made by `make.py` there)
//! run from a GGUF file and from a Hugging Face folder. Files radix cannot
//! run are the bad-input suite's (`tests/bad_input/gguf.rs`).

mod common;

use std::path::{Path, PathBuf};

use common::radix;
use serde_json::Value;

fn tiny(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../radix-models/tests/fixtures/tiny")
        .join(name)
}

/// `radix generate --json` greedily for 8 tokens of `model`.
fn generate(model: &Path) -> Value {
    let out = radix()
        .args(["generate", "--json", "--max-tokens", "8", "--model"])
        .arg(model)
        .arg("the quick brown fox")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).unwrap()
}

/// The GGUF file and the folder it was converted from hold the same
/// weights: the same prompt gives the same ids through either.
#[test]
fn gguf_and_folder_generate_alike() {
    for name in ["gemma3", "qwen3"] {
        let from_gguf = generate(&tiny(&format!("{name}.f32.gguf")));
        let from_folder = generate(&tiny(name));
        assert_eq!(from_gguf["prompt_ids"], from_folder["prompt_ids"], "{name}");
        assert_eq!(from_gguf["ids"], from_folder["ids"], "{name}");
        assert_eq!(from_gguf["ids"].as_array().map(Vec::len), Some(8), "{name}");
    }
}
