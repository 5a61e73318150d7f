//! Every architecture on its tiny random model (`tests/fixtures/tiny/`,
//! made by `make.py` there): from the GGUF file (f32, and Q4_K_M where made)
//! and from the Hugging Face folder, the last-position logits of a prompt
//! and 16 greedy ids against transformers'.

use std::path::PathBuf;

use radix::nn::MatrixFormat;
use radix::testing::{Tol, assert_all_close};
use radix_models::runner::Runner;
use radix_models::sampling::Sampler;
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(dir().join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("json")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("float") as f32)
        .collect()
}

/// f32 sums over at most 256 terms in 2 to 6 layers, logits of order 1 to
/// 10: 1e-4 is some hundred units of roundoff. The Q4_K_M file runs on
/// quantized blocks against transformers' dequantized f32 weights: the
/// same values, summed in another order.
const F32: Tol = Tol {
    rel: 0.0,
    abs: 1e-4,
};

/// Runs model `name` from `path` and compares it with `want` (`logits`,
/// `greedy`).
fn check(name: &str, path: PathBuf, want: &Value) {
    let prompt = ids(&expected()["prompt"]);
    let platform = radix::testing::platform();
    let mut runner =
        Runner::open(&platform, &path, 64, MatrixFormat::AsStored).unwrap_or_else(|e| {
            panic!("{name}: cannot open {}: {e}", path.display());
        });
    let (logits, _) = runner.prefill(&prompt).expect("prefill");
    let what = format!("{name} ({})", path.display());
    assert_all_close(
        &format!("{what} logits"),
        &logits,
        &floats(&want["logits"]),
        F32,
    );
    let greedy = runner
        .generate(&prompt, 16, &mut Sampler::greedy())
        .expect("generate");
    assert_eq!(greedy, ids(&want["greedy"]), "{what} greedy ids");
}

fn check_all(name: &str) {
    let e = expected();
    let model = &e["models"][name];
    let gguf_want = if model["gguf"].is_null() {
        model
    } else {
        &model["gguf"]
    };
    check(name, dir().join(format!("{name}.f32.gguf")), gguf_want);
    check(name, dir().join(name), model);
    if !model["q4_k_m"].is_null() {
        check(
            name,
            dir().join(format!("{name}.q4_k_m.gguf")),
            &model["q4_k_m"],
        );
    }
}

#[test]
fn llama() {
    check_all("llama");
}

#[test]
fn llama_linear_rope() {
    check_all("llama-linear");
}

#[test]
fn llama3_rope() {
    check_all("llama-llama3");
}

#[test]
fn qwen2() {
    check_all("qwen2");
}

#[test]
fn qwen2_yarn_rope() {
    check_all("qwen2-yarn");
}

#[test]
fn qwen3() {
    check_all("qwen3");
}

#[test]
fn gemma3() {
    check_all("gemma3");
}

#[test]
fn mistral() {
    check_all("mistral");
}
