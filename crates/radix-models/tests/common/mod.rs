//! What the real-model tests share: the reference outputs made with
//! PyTorch/transformers (`tests/fixtures/reference`, with the scripts that
//! made them and how they were cut down), and comparing greedy ids
//! (`greedy.rs`).
#![allow(dead_code, reason = "each test binary uses a part of this module")]

use std::path::{Path, PathBuf};

pub mod engine_ids;
pub mod greedy;

/// The folder of the reference outputs, `tests/fixtures/reference`.
pub fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reference")
}

/// A JSON file under [`reference_dir`].
pub fn reference_json(rel: &str) -> serde_json::Value {
    let path = reference_dir().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
