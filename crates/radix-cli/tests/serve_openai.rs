//! `radix serve` driven by the real `openai` Python client (installed from
//! PyPI into a venv under the target folder on first run): chat and text
//! completions, whole and streamed, equal to `radix generate`'s greedy text;
//! embeddings (base64, the client's default, and float) equal to
//! `radix embed`'s; errors as the client's exception types. Like radix's own
//! model fetches, it needs PyPI: where pip cannot install the client, it
//! fails and says so.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::server::Server;
use common::{output_within, radix_json};
use serde_json::Value;

const TEXTS: [&str; 2] = ["The cat sits on the mat.", "A feline rests on a rug."];

/// The most pip may take to install the client (it is also told `--timeout
/// 30 --retries 2` per connection), and the client's whole run.
const PIP_DEADLINE: Duration = Duration::from_secs(600);
const CLIENT_DEADLINE: Duration = Duration::from_secs(300);

/// A python that imports `openai`: a venv's, or, where `python3 -m venv`
/// is missing (Debian without python3-venv), `python3` with the package
/// installed into a folder on `PYTHONPATH`. A failure when pip cannot
/// install it.
fn python_with_openai() -> Command {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let venv = root.join("openai-venv");
    let target = root.join("openai-site");
    let python = |venv_python: bool| {
        let mut cmd = Command::new(if venv_python {
            venv.join("bin/python")
        } else {
            PathBuf::from("python3")
        });
        if !venv_python {
            cmd.env("PYTHONPATH", &target);
        }
        cmd
    };
    let has_openai = |venv_python: bool| {
        python(venv_python)
            .args(["-c", "import openai"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for venv_python in [true, false] {
        if has_openai(venv_python) {
            return python(venv_python);
        }
    }
    let made = output_within(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        PIP_DEADLINE,
    );
    let venv_python = made.status.success();
    if !venv_python {
        eprintln!(
            "python3 -m venv failed; installing openai into {} instead: {}",
            target.display(),
            String::from_utf8_lossy(&made.stderr)
        );
    }
    let mut pip = python(venv_python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ])
    .args(["--timeout", "30", "--retries", "2"]);
    if !venv_python {
        pip.arg("--target").arg(&target);
    }
    let pip = output_within(pip.arg("openai>=1.40,<3"), PIP_DEADLINE);
    assert!(
        pip.status.success(),
        "this test needs the openai client from PyPI, and pip could not install it \
         (is PyPI reachable?):\n{}",
        String::from_utf8_lossy(&pip.stderr)
    );
    assert!(
        has_openai(venv_python),
        "openai installed but not importable"
    );
    python(venv_python)
}

/// `radix ARGS` (a `--json` command): its JSON.
fn assert_close(got: &Value, want: &Value) {
    let (got, want) = (got.as_array().unwrap(), want.as_array().unwrap());
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.as_array().unwrap(), w.as_array().unwrap());
        assert_eq!(g.len(), w.len());
        for (a, b) in g.iter().zip(w) {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            // The same executable on the same inputs: equal up to the f32
            // round trip through JSON or base64.
            assert!((a - b).abs() <= 1e-6 + 1e-6 * b.abs(), "{a} vs {b}");
        }
    }
}

#[test]
fn the_openai_client_gets_what_radix_generate_and_embed_give() {
    let mut python = python_with_openai();
    let server = Server::start(&["--api-key", "sk-openai", "--context", "256"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve_openai.py");
    let out = output_within(
        python
            .arg(&script)
            .arg(format!("http://{}/v1", server.addr))
            .arg("sk-openai")
            .args(TEXTS),
        CLIENT_DEADLINE,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    drop(server);

    let greedy = ["--json", "--max-tokens", "10", "--temperature", "0"];
    let chat = radix_json(
        &[
            &["generate", "--chat", "--logits"],
            &greedy[..],
            &["What is 2+2?"],
        ]
        .concat(),
    );
    let completion =
        radix_json(&[&["generate"], &greedy[..], &["The capital of France is"]].concat());
    let embed = radix_json(&[&["embed", "--json"], &TEXTS[..]].concat());

    assert_eq!(got["models"], serde_json::json!(["smollm2", "minilm"]));
    assert_eq!(got["chat"]["text"], chat["text"], "{got}");
    assert_eq!(got["chat"]["role"], "assistant");
    assert_eq!(got["chat"]["finish_reason"], "length");
    let n_prompt = chat["prompt_ids"].as_array().unwrap().len();
    assert_eq!(got["chat"]["usage"]["prompt_tokens"], n_prompt);
    assert_eq!(got["chat"]["usage"]["completion_tokens"], 10);
    assert_eq!(got["chat_stream"]["text"], chat["text"]);
    // The stream asks the same again: all of its prompt but the last token
    // comes from the prompt cache (`prompt_tokens_details.cached_tokens`,
    // as the client reads it), and the rest of the usage is the same.
    let cached = |v: &Value| v["prompt_tokens_details"]["cached_tokens"].clone();
    assert_eq!(cached(&got["chat"]["usage"]), 0);
    assert_eq!(cached(&got["chat_stream"]["usage"]), n_prompt - 1);
    let mut stream_usage = got["chat_stream"]["usage"].clone();
    stream_usage["prompt_tokens_details"]["cached_tokens"] = 0.into();
    assert_eq!(stream_usage, got["chat"]["usage"]);
    assert_eq!(got["chat_stream"]["finish_reason"], "length");
    assert_eq!(got["completion"]["text"], completion["text"]);
    assert_eq!(got["completion_stream"]["text"], completion["text"]);
    assert_close(&got["embeddings_float"], &embed["embeddings"]);
    assert_close(&got["embeddings_base64"], &embed["embeddings"]);
    let n_tokens: usize = embed["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_array().unwrap().len())
        .sum();
    assert_eq!(got["embedding_usage"]["prompt_tokens"], n_tokens);
    assert_eq!(got["errors"]["unknown_model"]["status"], 400);
    assert_eq!(got["errors"]["unknown_model"]["param"], "model");
    assert_eq!(got["errors"]["wrong_key"]["status"], 401);
    assert_eq!(got["errors"]["bad_grammar"]["status"], 400);
    assert_eq!(got["errors"]["bad_grammar"]["param"], "grammar");

    // Every reply under the schema parses and validates, and ended by
    // itself.
    let schema = &got["json_schema"]["schema"];
    let validator = jsonschema::validator_for(schema).unwrap();
    let texts = got["json_schema"]["texts"].as_array().unwrap();
    assert_eq!(texts.len(), 5);
    for text in texts {
        let text = text.as_str().unwrap();
        let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(validator.is_valid(&value), "{text} against {schema}");
    }
    for f in got["json_schema"]["finishes"].as_array().unwrap() {
        assert_eq!(f, "stop");
    }

    // Log-probabilities: the log-softmax of `radix generate`'s logits.
    let entries = got["logprobs"].as_array().unwrap();
    let rows = chat["logits"].as_array().unwrap();
    assert_eq!(entries.len(), rows.len());
    for ((entry, row), id) in entries
        .iter()
        .zip(rows)
        .zip(chat["ids"].as_array().unwrap())
    {
        let row: Vec<f64> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let z = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
        let want = row[id.as_u64().unwrap() as usize] - z;
        let lp = entry["logprob"].as_f64().unwrap();
        assert!((lp - want).abs() < 2e-3, "{lp} vs {want}");
        let mut sorted: Vec<f64> = row.iter().map(|x| x - z).collect();
        sorted.sort_by(|a, b| b.total_cmp(a));
        for (t, w) in entry["top"].as_array().unwrap().iter().zip(&sorted) {
            assert!((t.as_f64().unwrap() - w).abs() < 2e-3, "{entry}");
        }
    }

    // A required tool call comes back as tool_calls, and the second turn
    // with its result completes.
    let call = &got["tool_call"];
    assert_eq!(call["finish_reason"], "tool_calls", "{call}");
    assert_eq!(call["calls"][0]["name"], "get_weather", "{call}");
    let args: Value =
        serde_json::from_str(call["calls"][0]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");
    assert!(call["second_turn"]["content"].is_string(), "{call}");

    // n = 3 with a seed: the same three choices twice, not all one.
    let n3 = got["n3"].as_array().unwrap();
    assert_eq!(n3[0], n3[1]);
    let three = n3[0].as_array().unwrap();
    assert_eq!(three.len(), 3);
    assert!(three[0] != three[1] || three[1] != three[2], "{three:?}");
}
