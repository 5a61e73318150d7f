//! `radix generate` picks the architecture a file names: the tiny random
//! models of `radix-models/tests/fixtures/tiny` (made by `make.py` there)
//! run from a GGUF file and from a Hugging Face folder, and files radix
//! cannot run give one error line naming the file and what is wrong.

mod common;

use std::path::{Path, PathBuf};

use common::{fails_with_one_error, radix, radix_process};
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

/// `file` with the bytes `from` (found once) replaced by `to`, written to
/// `dir`.
fn patched(dir: &Path, file: &str, from: &[u8], to: &[u8]) -> PathBuf {
    let mut bytes = std::fs::read(tiny(file)).unwrap();
    let at: Vec<usize> = bytes
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "{from:?} once in {file}");
    bytes[at[0]..at[0] + to.len()].copy_from_slice(to);
    let out = dir.join(file);
    std::fs::write(&out, bytes).unwrap();
    out
}

fn fails(model: &Path, want: &str) {
    fails_with_one_error(
        radix_process()
            .args(["generate", "--model"])
            .arg(model)
            .arg("hi"),
        want,
    );
}

/// The tensor-info bytes of `name` up to its type: the name with its
/// length, the rank, and `dims`.
fn tensor_info(name: &str, dims: &[u64]) -> Vec<u8> {
    let mut b = (name.len() as u64).to_le_bytes().to_vec();
    b.extend(name.as_bytes());
    b.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        b.extend(d.to_le_bytes());
    }
    b
}

#[test]
fn files_radix_cannot_run_are_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // A matrix in IQ2_XS (ggml type 17), which radix has no kernel for: its
    // Q4_K (type 12) type id changed; IQ2_XS blocks are smaller, so the
    // data still lies inside the file.
    let mut q4_k = tensor_info("blk.0.ffn_down.weight", &[256, 32]);
    let mut iq2_xs = q4_k.clone();
    q4_k.extend(12u32.to_le_bytes());
    iq2_xs.extend(17u32.to_le_bytes());
    let file = patched(d, "qwen3.q4_k_m.gguf", &q4_k, &iq2_xs);
    fails(&file, "has type IQ2_XS");
    fails(&file, "qwen3.q4_k_m.gguf: tensor `blk.0.ffn_down.weight`");

    // A metadata key the model needs, renamed away.
    let file = patched(
        d,
        "gemma3.f32.gguf",
        b"gemma3.attention.layer_norm_rms_epsilon",
        b"gemma3.attention.layer_norm_rms_epsiloX",
    );
    fails(
        &file,
        "gemma3.f32.gguf: metadata gemma3.attention.layer_norm_rms_epsilon missing",
    );

    // An architecture radix does not run.
    let mut from = b"general.architecture".to_vec();
    let mut to = from.clone();
    let value = |v: &[u8]| {
        let mut b = 8u32.to_le_bytes().to_vec(); // GGUF's string type
        b.extend((v.len() as u64).to_le_bytes());
        b.extend(v);
        b
    };
    from.extend(value(b"llama"));
    to.extend(value(b"rwkv6"));
    let file = patched(d, "llama.f32.gguf", &from, &to);
    fails(
        &file,
        "architecture \"rwkv6\" is not one radix runs (known: llama, mistral, qwen2, qwen3, gemma3)",
    );
}
