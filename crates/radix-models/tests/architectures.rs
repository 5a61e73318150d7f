//! Every architecture on its tiny random model (`tests/fixtures/tiny/`,
//! made by `make.py` there): from the GGUF file (f32, and Q4_K_M where made)
//! and from the Hugging Face folder, the last-position logits of a prompt
//! and 16 greedy ids against transformers'.

mod common;

use std::path::PathBuf;

use common::greedy::{assert_greedy_eq, top2_margin};

use radix::nn::MatrixFormat;
use radix::testing::{Tol, assert_all_close};
use radix_models::engine::Engine;
use radix_models::engine::Plan;
use radix_models::sampling::Sampler;
use radix_models::transformer::{Arch, DecoderConfig};
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
    let mut engine = Engine::open(&platform, &path, 64, MatrixFormat::Exact).unwrap_or_else(|e| {
        panic!("{name}: cannot open {}: {e}", path.display());
    });
    let (logits, _) = engine.prefill(&prompt).expect("prefill");
    let what = format!("{name} ({})", path.display());
    assert_all_close(
        &format!("{what} logits"),
        &logits,
        &floats(&want["logits"]),
        F32,
    );
    check_greedy(&format!("{what} greedy ids"), &mut engine, &prompt, want);
}

/// `engine`'s 16 greedy ids after `prompt` against `want["greedy"]`; a
/// difference names radix's top-2 logit margin at its step.
fn check_greedy(what: &str, engine: &mut Engine, prompt: &[u32], want: &Value) {
    let greedy = engine
        .generate(prompt, 16, &mut Sampler::greedy())
        .expect("generate");
    assert_greedy_eq(what, &greedy, &ids(&want["greedy"]), |k| {
        let (logits, _) = engine
            .prefill(&[prompt, &greedy[..k]].concat())
            .expect("prefill");
        top2_margin(&logits)
    });
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

/// Gemma 3's sliding and global layers are two block executables per step
/// length under `Plan::PerBlock` (the default, above); as one program they
/// are two bodies of one program, and compute the same.
#[test]
fn gemma3_as_one_program() {
    let e = expected();
    let want = &e["models"]["gemma3"];
    let platform = radix::testing::platform();
    let path = dir().join("gemma3.f32.gguf");
    let mut engine = Engine::open(&platform, &path, 64, MatrixFormat::Exact)
        .expect("open")
        .with_plan(Plan::OneProgram);
    let prompt = ids(&e["prompt"]);
    let (logits, _) = engine.prefill(&prompt).expect("prefill");
    assert_all_close("one program", &logits, &floats(&want["logits"]), F32);
    check_greedy("one program", &mut engine, &prompt, want);
}

#[test]
fn mistral() {
    check_all("mistral");
}

/// A GGUF file and the folder it was converted from describe one model:
/// the sizes, rotary bases and sliding layers read from either agree.
#[test]
fn gguf_and_folder_configs_agree() {
    for name in ["llama", "qwen2", "qwen3", "gemma3", "mistral"] {
        let gguf = radix::io::Gguf::open(&dir().join(format!("{name}.f32.gguf"))).expect("gguf");
        let from_gguf = DecoderConfig::from_gguf(&gguf).expect("gguf config");
        let folder = dir().join(name);
        let weights = radix::io::Safetensors::open(&folder.join("model.safetensors.index.json"))
            .expect("weights");
        let from_hf = DecoderConfig::from_hf(&folder, &weights).expect("hf config");
        let sizes = |c: &DecoderConfig| {
            (
                c.n_layers,
                c.dim,
                c.n_heads,
                c.n_kv_heads,
                c.head_dim,
                c.ffn_dim,
                c.vocab,
                c.tied_embeddings,
            )
        };
        assert_eq!(sizes(&from_gguf), sizes(&from_hf), "{name}");
        assert_eq!(from_gguf.rope_theta, from_hf.rope_theta, "{name}");
        assert_eq!(from_gguf.attn_scale, from_hf.attn_scale, "{name}");
        assert!(
            (from_gguf.rms_eps - from_hf.rms_eps).abs() < 1e-12,
            "{name}"
        );
        if name == "mistral" {
            // The converter writes Mistral as llama, without its window.
            assert_eq!(from_gguf.arch, Arch::Llama);
            assert_eq!(from_hf.arch, Arch::Mistral);
            assert_eq!(from_gguf.sliding_window, None);
            assert_eq!(from_hf.sliding_window, Some(4));
        } else {
            assert_eq!(from_gguf.arch, from_hf.arch, "{name}");
            assert_eq!(from_gguf.sliding_window, from_hf.sliding_window, "{name}");
            assert_eq!(from_gguf.sliding_layers, from_hf.sliding_layers, "{name}");
            assert_eq!(
                from_gguf.rope_theta_sliding, from_hf.rope_theta_sliding,
                "{name}"
            );
        }
    }
    let gemma = radix::io::Gguf::open(&dir().join("gemma3.f32.gguf")).expect("gguf");
    let gemma = DecoderConfig::from_gguf(&gemma).expect("config");
    assert_eq!(gemma.sliding_layers, [true, true, true, true, true, false]);
    // GGUF stores Gemma's norms as 1 + weight, the folder as weight.
    assert_eq!(gemma.norm_offset, 0.0);
}

/// The tiny llama folder with its `config.json` edited by `edit`.
fn edited_folder(tmp: &std::path::Path, edit: impl Fn(&mut Value)) -> PathBuf {
    let from = dir().join("llama");
    for entry in std::fs::read_dir(&from).expect("folder") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), tmp.join(entry.file_name())).expect("copy");
    }
    let path = tmp.join("config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("config")).expect("json");
    edit(&mut config);
    std::fs::write(&path, config.to_string()).expect("write");
    tmp.to_path_buf()
}

/// A folder of an architecture radix does not run, or whose configuration
/// lacks a size, is a `Config` error naming `config.json` and the key.
#[test]
fn folder_config_errors_name_the_key() {
    for (edit, want) in [
        (
            Box::new(|c: &mut Value| c["model_type"] = "gpt_neox".into())
                as Box<dyn Fn(&mut Value)>,
            "architecture \"gpt_neox\" is not one radix runs (known: llama, mistral, qwen2, qwen3, gemma3_text)",
        ),
        (
            Box::new(|c: &mut Value| {
                c.as_object_mut().unwrap().remove("hidden_size");
            }),
            "config.json: hidden_size missing",
        ),
        (
            Box::new(|c: &mut Value| c["num_attention_heads"] = 0.into()),
            "num_attention_heads is 0, not a whole number",
        ),
        (
            Box::new(|c: &mut Value| c["rope_parameters"]["rope_type"] = "longrope".into()),
            "rope scaling \"longrope\" is not one radix knows",
        ),
    ] {
        let tmp = tempfile::tempdir().expect("temp dir");
        let folder = edited_folder(tmp.path(), edit);
        let platform = radix::testing::platform();
        let err = match Engine::open(&platform, &folder, 64, MatrixFormat::AsStored) {
            Ok(_) => panic!("{want}: opened"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "{want:?} not in {err}");
    }
}
