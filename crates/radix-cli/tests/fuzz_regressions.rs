//! The fuzz targets (`fuzz/src/targets.rs`, built here without libFuzzer)
//! run on every input a fuzzer found a crash with (`fuzz/regressions/TARGET/`,
//! kept after the fix) and on a few of the real files their corpora are
//! seeded with: a fix stays fixed, and the targets keep compiling with the
//! code they call.

#[allow(dead_code, reason = "the targets read; the writers serve the CLI")]
#[path = "../src/npy.rs"]
mod npy;
#[allow(dead_code, reason = "the targets use the signature reader only")]
#[path = "../src/signature.rs"]
mod signature;
#[path = "../../../fuzz/src/targets.rs"]
mod targets;

use std::path::{Path, PathBuf};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// The files of `dir` (none if it does not exist), sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn regressions_and_seeds_run_cleanly() {
    let mut inputs: Vec<(&str, PathBuf)> = Vec::new();
    for target in targets::TARGETS {
        for file in files(&repo("fuzz/regressions").join(target)) {
            inputs.push((target, file));
        }
    }
    let data = repo("crates/radix-cli/tests/data");
    let tiny = repo("crates/radix-models/tests/fixtures/tiny");
    inputs.extend([
        ("mlir", data.join("sharded2d_shardy.mlir")),
        ("mlir", data.join("sharded_gspmd.mlir")),
        ("npz", data.join("ints_inputs.npz")),
        ("gguf", tiny.join("qwen2.q4_k_m.gguf")),
        ("tokenizer_gguf", tiny.join("llama.q4_k_m.gguf")),
        (
            "safetensors",
            tiny.join("qwen3/model-00002-of-00002.safetensors"),
        ),
        ("tokenizer_json", tiny.join("qwen3/tokenizer.json")),
    ]);
    for (target, file) in &inputs {
        let bytes = std::fs::read(file).unwrap();
        assert!(targets::run(target, &bytes), "no target {target}");
    }
    targets::remove_scratch();
    assert!(inputs.len() >= 7);
}
