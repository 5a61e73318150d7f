//! `radix serve` (the release build) over plain HTTP: one server (SmolLM2
//! and MiniLM, an API key, one slot and a queue of one) driven through every
//! endpoint and every error status, then stopped with SIGTERM while a
//! stream runs; and batched decoding of other architectures. The checks of
//! one server run in order in one test: the queue and slot checks need the
//! server to themselves, and the last one stops it. `serve_hostile.rs`
//! drives servers as a hostile client would.
//!
//! Races are taken out with `RADIX_SERVE_FAULT=hold:N`: a sequence asking
//! for N tokens is held (no decode step runs) until its client leaves, so
//! the slots and the queue are full, or sequences gathered into one batch,
//! for as long as a check needs.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::reference_dir;
use common::server::{Server, read_events};
use serde_json::{Value, json};

const KEY: &str = "sk-test";
const AUTH: (&str, &str) = ("Authorization", "Bearer sk-test");

/// `POST path` with the API key.
fn post(s: &Server, path: &str, body: &Value) -> common::server::Answer {
    s.request("POST", path, &[AUTH], &body.to_string())
}

/// Checks a 400 whose error object names `param`.
fn bad_request(s: &Server, path: &str, body: &str, param: Option<&str>) {
    let a = s.request("POST", path, &[AUTH], body);
    assert_eq!(a.status, 400, "{body}: {}", a.body);
    let e = &a.json()["error"];
    assert_eq!(e["type"], "invalid_request_error", "{}", a.body);
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{}",
        a.body
    );
    assert_eq!(e["param"].as_str(), param, "{body}: {}", a.body);
}

/// `max_tokens` of the sequence `RADIX_SERVE_FAULT=hold:HELD` holds.
const HELD: u64 = 199;

#[test]
fn serve_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    // transformers dequantizes: the answers compared with its reference
    // come from products with f32 activations.
    let mut s = Server::spawn(
        Server::command(&[
            "--exact",
            "--api-key-file",
            key_file.to_str().unwrap(),
            "--max-batch",
            "1",
            "--max-queue",
            "1",
            "--context",
            "256",
            "--shutdown-timeout",
            "60",
        ])
        .env("RADIX_SERVE_FAULT", format!("hold:{HELD}")),
    );
    health_and_metrics_need_no_key(&s);
    v1_needs_the_key(&s);
    chat_whole_and_streamed_agree(&s);
    completion_stops_at_a_stop_string(&s);
    bad_requests_name_the_field(&s);
    too_large_a_body_is_413(&s);
    full_queue_is_429_and_a_hang_up_frees_the_slot(&s);
    sigterm_finishes_the_running_stream_then_exits_0(&mut s);
}

fn health_and_metrics_need_no_key(s: &Server) {
    let h = s.get("/health");
    assert_eq!(h.status, 200, "{}", h.body);
    let h = h.json();
    assert_eq!(h["status"], "ok");
    assert_eq!(h["model"], "smollm2");
    assert_eq!(h["embed_model"], "minilm");
    assert_eq!(h["context"], 256);
    assert_eq!(h["cache_type"], "f16");
    assert_eq!(h["max_batch"], 1);
    assert_eq!(h["prefill_buckets"], json!([8, 16, 32, 64, 128, 256]));
    assert_eq!(h["decode_batch_sizes"], json!([1]));
    let m = s.get("/metrics");
    assert_eq!(m.status, 200);
    assert!(m.header("content-type").unwrap().starts_with("text/plain"));
    for name in [
        "radix_requests_total{route=\"/health\",status=\"200\"} 1",
        "# TYPE radix_time_to_first_token_seconds histogram",
        "# TYPE radix_time_per_output_token_seconds histogram",
        "radix_queue_depth 0",
        "radix_active_slots 0",
        "radix_prompt_tokens_total 0",
    ] {
        assert!(m.body.contains(name), "{name} not in {}", m.body);
    }
    assert_eq!(s.get("/nowhere").status, 404);
}

fn v1_needs_the_key(s: &Server) {
    for headers in [
        vec![],
        vec![("Authorization", "Bearer wrong")],
        vec![("Authorization", "Bearer sk-tes")],
        vec![("Authorization", "Bearer sk-test2")],
        vec![("Authorization", KEY)],
    ] {
        let a = s.request("GET", "/v1/models", &headers, "");
        assert_eq!(a.status, 401, "{headers:?}: {}", a.body);
        assert_eq!(a.header("www-authenticate"), Some("Bearer"));
        assert_eq!(a.json()["error"]["code"], "invalid_api_key");
    }
    let a = s.request("POST", "/v1/completions", &[], "{}");
    assert_eq!(a.status, 401);
    // The scheme is case-insensitive (RFC 9110).
    let a = s.request(
        "GET",
        "/v1/models",
        &[("Authorization", "bearer sk-test")],
        "",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let a = s.request("GET", "/v1/models", &[AUTH], "");
    assert_eq!(a.status, 200, "{}", a.body);
    let ids: Vec<Value> = a.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids, ["smollm2", "minilm"]);
    assert!(
        s.get("/metrics")
            .body
            .contains("radix_requests_total{route=\"/v1/models\",status=\"401\"} 5")
    );
}

/// Reference case `i` (transformers, `ref_smollm2.py`): its prompt's token
/// count and the text of its 10 greedy tokens.
fn case(i: usize) -> (usize, String) {
    let path = reference_dir().join("smollm2/smollm2_reference.json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let c = &json["cases"][i];
    let n = c["prompt_ids"].as_array().unwrap().len();
    (n, c["greedy_10_text"].as_str().unwrap().to_string())
}

/// The reference's third prompt is the chat template of this message.
fn chat_whole_and_streamed_agree(s: &Server) {
    let (n_prompt, reference) = case(2);
    let mut req = json!({
        "model": "smollm2",
        "messages": [{"role": "user", "content": "What is 2+2?"}],
        "max_tokens": 10,
        "temperature": 0,
    });
    let whole = post(s, "/v1/chat/completions", &req);
    assert_eq!(whole.status, 200, "{}", whole.body);
    let whole = whole.json();
    assert_eq!(whole["object"], "chat.completion");
    let choice = &whole["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let text = choice["message"]["content"].as_str().unwrap().to_string();
    assert_eq!(text, reference);
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(whole["usage"]["prompt_tokens"], n_prompt);
    assert_eq!(whole["usage"]["completion_tokens"], 10);
    assert_eq!(whole["usage"]["total_tokens"], n_prompt + 10);

    req["stream"] = json!(true);
    req["stream_options"] = json!({"include_usage": true});
    let a = post(s, "/v1/chat/completions", &req);
    assert_eq!(a.status, 200);
    assert!(
        a.header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events: Vec<&str> = a
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{}", a.body);
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, text);
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[n - 1]["choices"], json!([]));
    // The same prompt again: all but its last token come from the prompt
    // cache, and the answer is the same.
    let mut usage = chunks[n - 1]["usage"].clone();
    let cached = usage["prompt_tokens_details"]["cached_tokens"].take();
    assert_eq!(cached, n_prompt - 1);
    let mut want = whole["usage"].clone();
    want["prompt_tokens_details"]["cached_tokens"].take();
    assert_eq!(usage, want);
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"])
    );
}

fn completion_stops_at_a_stop_string(s: &Server) {
    let (n_prompt, reference) = case(0);
    let req = json!({
        "model": "smollm2",
        "prompt": "The capital of France is",
        "max_tokens": 10,
        "temperature": 0,
    });
    let a = post(s, "/v1/completions", &req).json();
    assert_eq!(a["object"], "text_completion");
    assert_eq!(a["choices"][0]["text"], reference.as_str());
    assert_eq!(a["usage"]["prompt_tokens"], n_prompt);
    let mut stopped = req.clone();
    stopped["stop"] = json!(["ris", "zzz"]);
    let b = post(s, "/v1/completions", &stopped).json();
    assert_eq!(b["choices"][0]["text"], " Pa", "{b}");
    assert_eq!(b["choices"][0]["finish_reason"], "stop");
}

fn bad_requests_name_the_field(s: &Server) {
    let chat = "/v1/chat/completions";
    let text = "/v1/completions";
    bad_request(s, chat, "{\"model\": \"smollm2\", \"messages\": [", None);
    bad_request(s, chat, "not json", None);
    bad_request(
        s,
        chat,
        r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
        Some("model"),
    );
    bad_request(
        s,
        chat,
        r#"{"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}"#,
        Some("model"),
    );
    bad_request(
        s,
        chat,
        r#"{"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "ten"}"#,
        Some("max_tokens"),
    );
    bad_request(
        s,
        chat,
        r#"{"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "temperature": -1}"#,
        Some("temperature"),
    );
    bad_request(
        s,
        chat,
        r#"{"model": "smollm2", "messages": [{"role": "user", "content": 3}]}"#,
        Some("messages[0].content"),
    );
    bad_request(
        s,
        chat,
        r#"{"model": "smollm2", "messages": [{"role": "robot", "content": "hi"}]}"#,
        Some("messages[0].role"),
    );
    bad_request(
        s,
        chat,
        r#"{"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "frobnicate": 1}"#,
        Some("frobnicate"),
    );
    bad_request(
        s,
        chat,
        r#"{"model": "smollm2", "messages": []}"#,
        Some("messages"),
    );
    bad_request(
        s,
        text,
        r#"{"model": "smollm2", "prompt": "hi", "max_tokens": 300}"#,
        Some("max_tokens"),
    );
    bad_request(
        s,
        text,
        r#"{"model": "smollm2", "prompt": "hi", "max_tokens": 0}"#,
        Some("max_tokens"),
    );
    bad_request(
        s,
        text,
        r#"{"model": "smollm2", "prompt": "hi", "stop": 5}"#,
        Some("stop"),
    );
    bad_request(
        s,
        text,
        r#"{"model": "smollm2", "prompt": "hi", "n": 17}"#,
        Some("n"),
    );
    let long = json!({"model": "smollm2", "prompt": "word ".repeat(300), "max_tokens": 1});
    bad_request(s, text, &long.to_string(), Some("prompt"));
    bad_request(
        s,
        "/v1/embeddings",
        r#"{"model": "smollm2", "input": "hi"}"#,
        Some("model"),
    );
    bad_request(
        s,
        "/v1/embeddings",
        r#"{"model": "minilm", "input": [1, 2]}"#,
        Some("input"),
    );
}

/// A declared body over the limit is refused from its head, before a byte
/// of it is read.
fn too_large_a_body_is_413(s: &Server) {
    for len in [(1 << 20) + 1, 10_000_000_000, 1 << 60] {
        let a = s.request_without_body("POST", "/v1/completions", &[AUTH], len);
        assert_eq!(a.status, 413, "{len}: {}", a.body);
        assert!(a.json()["error"]["message"].is_string());
    }
}

/// The status of a streamed request's answer (its head comes at once when
/// queued), and the connection.
fn stream_status(s: &Server, body: &str) -> (u16, BufReader<TcpStream>) {
    let mut r = BufReader::new(s.send("POST", "/v1/completions", &[AUTH], body));
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line.split(' ').nth(1).and_then(|c| c.parse().ok());
    (
        status.unwrap_or_else(|| panic!("not an answer: {line:?}")),
        r,
    )
}

fn full_queue_is_429_and_a_hang_up_frees_the_slot(s: &Server) {
    let request = |max_tokens: u64| {
        json!({
            "model": "smollm2", "prompt": "Once upon a time", "max_tokens": max_tokens,
            "temperature": 0, "stream": true,
        })
        .to_string()
    };
    // The one slot, held: no token comes after the first until it leaves.
    let (status, mut running) = stream_status(s, &request(HELD));
    assert_eq!(status, 200);
    assert_eq!(read_events(&mut running, 1).len(), 1);
    s.wait_metric("radix_active_slots", 1.0);
    // The one place in the queue.
    let (status, waiting) = stream_status(s, &request(200));
    assert_eq!(status, 200);
    s.wait_metric("radix_queue_depth", 1.0);
    let a = s.request("POST", "/v1/completions", &[AUTH], &request(200));
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(a.header("retry-after"), Some("1"));
    assert_eq!(a.json()["error"]["type"], "rate_limit_error");
    // A waiting client that hangs up gives its place back within a second.
    drop(waiting);
    let t = Instant::now();
    // Each try that finds the place still taken is a 429 of its own.
    let mut refused = 1;
    let mut waiting = loop {
        let (status, r) = stream_status(s, &request(200));
        if status == 200 {
            break r;
        }
        assert_eq!(status, 429);
        refused += 1;
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the place stayed taken"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Hanging up ends the running sequence: the waiting one gets the slot.
    drop(running);
    assert_eq!(read_events(&mut waiting, 1).len(), 1);
    s.wait_metric("radix_queue_depth", 0.0);
    assert!(s.metric("radix_cancelled_total") >= 2.0);
    drop(waiting);
    s.wait_metric("radix_active_slots", 0.0);
    let counted =
        format!("radix_requests_total{{route=\"/v1/completions\",status=\"429\"}} {refused}");
    assert!(s.get("/metrics").body.contains(&counted), "{counted}");
}

fn sigterm_finishes_the_running_stream_then_exits_0(s: &mut Server) {
    let req = json!({
        "model": "smollm2", "prompt": "Once upon a time", "max_tokens": 12,
        "temperature": 0, "stream": true,
    });
    let mut stream = BufReader::new(s.send("POST", "/v1/completions", &[AUTH], &req.to_string()));
    assert_eq!(read_events(&mut stream, 1).len(), 1);
    s.terminate();
    let rest = read_events(&mut stream, usize::MAX);
    assert_eq!(rest.last().map(String::as_str), Some("[DONE]"), "{rest:?}");
    let finish: Value = serde_json::from_str(&rest[rest.len() - 2]).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    assert_eq!(s.wait_exit(Duration::from_secs(30)), Some(0));
    assert!(std::net::TcpStream::connect(&s.addr).is_err());
}

/// A tiny model of `radix-models/tests/fixtures/tiny`.
fn tiny(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../radix-models/tests/fixtures/tiny")
        .join(name)
}

/// `radix generate --json` greedily for `n` tokens of `model`: its text
/// and how many tokens it generated.
fn generate(model: &str, prompt: &str, n: usize) -> (String, usize) {
    let n = n.to_string();
    let json = common::radix_json(&[
        "generate",
        "--json",
        "--max-tokens",
        &n,
        "--model",
        model,
        prompt,
    ]);
    let n = json["ids"].as_array().unwrap().len();
    (json["text"].as_str().unwrap().to_string(), n)
}

/// Models of other architectures than SmolLM2's (Qwen3; Gemma 3, whose
/// sliding window of 4 positions is shorter than the sequences), served in
/// a batch of 4: five greedy completions queued while a held sequence
/// stops the decode steps, so that they decode together once it leaves
/// (the decode steps then advance more sequences than there are steps),
/// each answer equal to `radix generate`'s for the same file and prompt.
#[test]
fn other_architectures_batched_answer_as_generate_does() {
    const N: usize = 24;
    const HOLD: usize = 30;
    let prompts = [
        "the quick brown fox",
        "hello world, how are you",
        "a b c",
        "jumps over the lazy dog again and again",
        "zebra",
    ];
    for name in ["qwen3.q4_k_m.gguf", "gemma3.q4_k_m.gguf"] {
        let path = tiny(name);
        let model = path.to_str().unwrap();
        let want: Vec<(String, usize)> = prompts.iter().map(|p| generate(model, p, N)).collect();
        let s = Server::spawn(
            Server::command(&[
                "--model",
                model,
                "--embed-model",
                "none",
                "--max-batch",
                "4",
                "--context",
                "64",
            ])
            .env("RADIX_SERVE_FAULT", format!("hold:{HOLD}")),
        );
        assert_eq!(
            s.get("/health").json()["decode_batch_sizes"],
            json!([1, 2, 4])
        );
        // Held, it must not end at its first token.
        assert!(want[4].1 > 1, "{name}: \"zebra\" ends at once");
        let hold = json!({
            "model": model, "prompt": "zebra", "max_tokens": HOLD, "temperature": 0,
            "stream": true,
        });
        // Its first token's text may be empty (no event): the gauge says
        // when it runs.
        let held = s.send("POST", "/v1/completions", &[], &hold.to_string());
        s.wait_metric("radix_active_slots", 1.0);
        let answers: Vec<Value> = std::thread::scope(|scope| {
            let threads: Vec<_> = prompts
                .iter()
                .map(|p| {
                    let s = &s;
                    scope.spawn(move || {
                        let req = json!({
                            "model": model, "prompt": p, "max_tokens": N, "temperature": 0,
                        });
                        let a = s.post("/v1/completions", &req.to_string());
                        assert_eq!(a.status, 200, "{name} {p:?}: {}", a.body);
                        a.json()
                    })
                })
                .collect();
            // Three join the held one; two wait. Then the held one leaves.
            s.wait_metric("radix_active_slots", 4.0);
            s.wait_metric("radix_queue_depth", 2.0);
            // The held prompt ran in one step (its first token comes from
            // it); none has run since.
            assert!(s.metric("radix_decode_steps_total") <= 1.0);
            drop(held);
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for ((p, (text, n)), a) in prompts.iter().zip(&want).zip(&answers) {
            assert_eq!(a["choices"][0]["text"], *text, "{name} {p:?}");
            assert_eq!(a["usage"]["completion_tokens"], *n, "{name} {p:?}");
        }
        let (steps, rows) = (
            s.metric("radix_decode_steps_total"),
            s.metric("radix_decode_rows_total"),
        );
        // The first step after the held one left ran at least three rows.
        assert!(
            rows >= steps + 2.0,
            "{name}: {rows} rows in {steps} steps: no batching"
        );
    }
}
