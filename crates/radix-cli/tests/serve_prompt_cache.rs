//! `radix serve`'s prompt cache and chunked prompts (the release build, the
//! tiny Qwen3 and Gemma 3 models): a prompt that begins as an earlier one
//! did runs only the rest (`usage.prompt_tokens_details.cached_tokens`
//! says how many came from the cache, and `/metrics` counts them), and
//! answers as `radix generate` does; with `--cache-ram 0` nothing is
//! cached; a long prompt run in chunks of 4 tokens beside a running stream
//! answers as `radix generate` does too; and so do the answers of a Q8_0
//! cache (`--cache-type q8_0`), its entries pasted as stored.

mod common;

use common::server::Server;
use serde_json::{Value, json};

const TEXT: &str = "/v1/completions";
/// Tokens per answer.
const N: usize = 12;

fn tiny(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../radix-models/tests/fixtures/tiny")
        .join(name);
    path.to_str().unwrap().to_string()
}

/// `radix generate --json --exact` greedily for [`N`] tokens: the text.
/// Products with f32 activations: the tiny random models' logits lie close
/// together, and with 8-bit activations a token run in another step (after
/// a hit, or in another chunk) may round its activations otherwise.
fn generate(model: &str, prompt: &str) -> String {
    generate_with(model, prompt, &[])
}

/// [`generate`] with `extra` flags.
fn generate_with(model: &str, prompt: &str, extra: &[&str]) -> String {
    let n = N.to_string();
    let args = [
        "generate",
        "--json",
        "--exact",
        "--max-tokens",
        &n,
        "--model",
        model,
    ];
    common::radix_json(&[&args[..], extra, &[prompt]].concat())["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `radix serve --exact` of the tiny `model` with `extra` flags.
fn serve(model: &str, context: &str, extra: &[&str]) -> Server {
    let args = [
        "--model",
        model,
        "--embed-model",
        "none",
        "--context",
        context,
        "--exact",
    ];
    Server::start(&[&args[..], extra].concat())
}

/// A greedy completion of `prompt`: the answer's JSON (a 200).
fn complete(s: &Server, model: &str, prompt: &str) -> Value {
    let req = json!({"model": model, "prompt": prompt, "max_tokens": N, "temperature": 0});
    let a = s.post(TEXT, &req.to_string());
    assert_eq!(a.status, 200, "{prompt:?}: {}", a.body);
    a.json()
}

fn cached(answer: &Value) -> u64 {
    answer["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("usage.prompt_tokens_details.cached_tokens")
}

const SHARED: &str = "the quick brown fox jumps over the lazy dog; ";

#[test]
fn a_shared_beginning_runs_once_and_answers_as_generate_does() {
    for name in ["qwen3.q4_k_m.gguf", "gemma3.q4_k_m.gguf"] {
        let model = tiny(name);
        let prompts = [
            format!("{SHARED}hello"),
            format!("{SHARED}a b c"),
            format!("{SHARED}a b c d e"),
        ];
        let want: Vec<String> = prompts.iter().map(|p| generate(&model, p)).collect();
        let s = serve(&model, "128", &[]);
        let first = complete(&s, &model, &prompts[0]);
        assert_eq!(cached(&first), 0, "{name}: nothing cached yet");
        assert_eq!(first["choices"][0]["text"], want[0], "{name}");
        let n_shared = first["usage"]["prompt_tokens"].as_u64().unwrap() - 1;
        let second = complete(&s, &model, &prompts[1]);
        assert_eq!(second["choices"][0]["text"], want[1], "{name}");
        let hit = cached(&second);
        assert!(
            hit >= SHARED.len() as u64 / 4 && hit <= n_shared,
            "{name}: {hit} cached"
        );
        // The third begins as the second did, further than the shared part.
        let third = complete(&s, &model, &prompts[2]);
        assert_eq!(third["choices"][0]["text"], want[2], "{name}");
        assert!(cached(&third) > hit, "{name}: {} cached", cached(&third));
        let counted = s.metric("radix_prompt_tokens_cached_total");
        assert_eq!(counted, (hit + cached(&third)) as f64, "{name}");
        // llama.cpp's `cache_prompt: false`: every token runs.
        let req = json!({"model": model, "prompt": prompts[2], "max_tokens": N,
                         "temperature": 0, "cache_prompt": false});
        let a = s.post(TEXT, &req.to_string());
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(cached(&a.json()), 0, "{name}: cache_prompt false");
        assert_eq!(a.json()["choices"][0]["text"], want[2], "{name}");

        let off = serve(&model, "128", &["--cache-ram", "0"]);
        complete(&off, &model, &prompts[0]);
        let again = complete(&off, &model, &prompts[1]);
        assert_eq!(cached(&again), 0, "{name}: --cache-ram 0");
        assert_eq!(again["choices"][0]["text"], want[1], "{name}");
    }
}

/// `max_tokens` of the stream `RADIX_SERVE_FAULT=hold:HOLD` holds (no
/// decode step runs while it does).
const HOLD: usize = 30;

/// A prompt of many chunks arrives while a stream runs: with `--prefill-chunk
/// 4` it runs 4 tokens a turn, joins the batch once all have run, and its
/// answer is `radix generate`'s.
#[test]
fn a_long_prompt_in_chunks_beside_a_stream_answers_as_generate_does() {
    let model = tiny("qwen3.q4_k_m.gguf");
    let long = SHARED.repeat(3);
    let want = generate(&model, &long);
    let s = Server::spawn(
        Server::command(&[
            "--model",
            &model,
            "--embed-model",
            "none",
            "--context",
            "256",
            "--exact",
            "--prefill-chunk",
            "4",
            "--cache-ram",
            "0",
        ])
        .env("RADIX_SERVE_FAULT", format!("hold:{HOLD}")),
    );
    let hold = json!({
        "model": model, "prompt": "zebra", "max_tokens": HOLD, "temperature": 0,
        "stream": true,
    });
    let held = s.send("POST", TEXT, &[], &hold.to_string());
    s.wait_metric("radix_active_slots", 1.0);
    let answer = std::thread::scope(|scope| {
        let long = scope.spawn(|| complete(&s, &model, &long));
        // Every chunk ran beside the held stream; then it leaves.
        s.wait_metric("radix_active_slots", 2.0);
        drop(held);
        long.join().unwrap()
    });
    assert_eq!(answer["choices"][0]["text"], want);
    let n = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(n > 32, "{n} prompt tokens: more than 8 chunks");
}

#[test]
fn bad_prompt_cache_flags_are_refused() {
    for (flag, value, says) in [
        ("--prefill-chunk", "0", "--prefill-chunk must be at least 1"),
        ("--cache-ram=-1", "", "--cache-ram"),
        (
            "--cache-ram",
            "2000000000",
            "--cache-ram must be from 0 to 2^30 MiB",
        ),
    ] {
        let mut cmd = common::radix_release();
        cmd.args(["serve", "--port", "0", "--embed-model", "none", flag, value]);
        let out = common::output_within(&mut cmd, std::time::Duration::from_secs(60));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
}

/// `--cache-type q8_0`: `/health` says so, and the answers, the second
/// after a hit on the shared beginning (its blocks pasted as stored), are
/// `radix generate --cache-type q8_0`'s.
#[test]
fn a_q8_0_cache_answers_as_generate_does() {
    let model = tiny("qwen3.q4_k_m.gguf");
    let q8_0 = ["--cache-type", "q8_0"];
    let prompts = [format!("{SHARED}hello"), format!("{SHARED}a b c")];
    let want: Vec<String> = prompts
        .iter()
        .map(|p| generate_with(&model, p, &q8_0))
        .collect();
    let s = serve(&model, "128", &q8_0);
    assert_eq!(s.get("/health").json()["cache_type"], "q8_0");
    let first = complete(&s, &model, &prompts[0]);
    assert_eq!(first["choices"][0]["text"], want[0]);
    let second = complete(&s, &model, &prompts[1]);
    assert_eq!(second["choices"][0]["text"], want[1]);
    assert!(cached(&second) > 0, "{} cached", cached(&second));
}
