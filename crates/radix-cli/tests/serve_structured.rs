//! `radix serve` (the release build) holding replies to JSON schemas and
//! grammars, and its sampling and API breadth: every reply under a schema
//! parses and validates (the `jsonschema` crate), whole and streamed,
//! greedy and sampled; grammars (GBNF and Lark) hold; a grammar that does
//! not compile is a 400 naming its field; `logprobs` are the log-softmax of
//! `radix generate --json --logits`; `n` choices with a seed come back the
//! same; penalties, bias and `min_p` change the choice as they should; stop
//! strings that straddle tokens cut the text; `/tokenize`, `/detokenize`
//! and `/apply-template` agree with `radix generate`; and the default
//! context takes a 1,300-token chat.

mod common;

use std::collections::HashMap;
use std::io::BufReader;

use common::radix;
use common::server::{Server, read_events};
use serde_json::{Value, json};

const CHAT: &str = "/v1/chat/completions";
const TEXT: &str = "/v1/completions";

/// `POST path` of `body`: the answer's JSON, which must be a 200.
fn ok(s: &Server, path: &str, body: &Value) -> Value {
    let a = s.post(path, &body.to_string());
    assert_eq!(a.status, 200, "{body}: {}", a.body);
    a.json()
}

/// `POST path` of `body`: a 400 whose error names `param`.
fn refused(s: &Server, path: &str, body: &Value, param: &str) {
    let a = s.post(path, &body.to_string());
    assert_eq!(a.status, 400, "{body}: {}", a.body);
    assert_eq!(a.json()["error"]["param"], param, "{body}: {}", a.body);
}

/// The streamed answer of `body` (with `stream: true` added): each choice's
/// text, by index, and the finish reasons.
fn streamed(s: &Server, path: &str, body: &Value) -> (Vec<String>, Vec<String>) {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let conn = s.send("POST", path, &[], &body.to_string());
    let events = read_events(&mut BufReader::new(conn), 10_000);
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let mut texts: Vec<String> = vec![];
    let mut finishes: Vec<String> = vec![];
    for e in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(e).unwrap();
        assert!(chunk.get("error").is_none(), "{e}");
        for c in chunk["choices"].as_array().unwrap() {
            let i = c["index"].as_u64().unwrap() as usize;
            if texts.len() <= i {
                texts.resize(i + 1, String::new());
                finishes.resize(i + 1, String::new());
            }
            let piece = c["delta"]["content"].as_str().or(c["text"].as_str());
            texts[i].push_str(piece.unwrap_or(""));
            if let Some(f) = c["finish_reason"].as_str() {
                finishes[i] = f.to_string();
            }
        }
    }
    (texts, finishes)
}

/// The text of choice `i` of a whole answer.
fn text_of(answer: &Value, i: usize) -> String {
    let c = &answer["choices"][i];
    c["message"]["content"]
        .as_str()
        .or(c["text"].as_str())
        .unwrap_or_else(|| panic!("no text in {answer}"))
        .to_string()
}

fn schemas() -> Vec<Value> {
    vec![
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 16},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "likes_cats": {"type": "boolean"}
            },
            "required": ["name", "age", "likes_cats"],
            "additionalProperties": false
        }),
        json!({
            "type": "array",
            "items": {"type": "string", "enum": ["red", "green", "blue"]},
            "minItems": 1,
            "maxItems": 3
        }),
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "maxLength": 24},
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^[a-z]{1,8}$"},
                    "maxItems": 2
                },
                "rating": {"enum": [1, 2, 3]}
            },
            "required": ["city", "tags", "rating"],
            "additionalProperties": false
        }),
    ]
}

/// Checks that `text` parses and validates against `schema`.
fn validates(schema: &Value, text: &str) {
    let value: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let validator = jsonschema::validator_for(schema).expect("a valid schema");
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{text} against {schema}: {errors:?}");
}

#[test]
fn structured_output_and_sampling_over_http() {
    // No prompt cache: the checks compare log-probabilities between
    // requests and with `radix generate`, and a prompt cache hit runs a
    // prompt's last tokens in a step of their own, whose 8-bit activations
    // may round otherwise (moving logits by a few tenths).
    let s = Server::start(&[
        "--embed-model",
        "none",
        "--context",
        "512",
        "--max-batch",
        "4",
        "--cache-ram",
        "0",
    ]);
    schemas_hold_whole_and_streamed(&s);
    json_object_is_an_object(&s);
    grammars_hold(&s);
    bad_grammars_are_400(&s);
    let generated = logprobs_are_the_log_softmax_of_the_logits(&s);
    text_utilities_agree(&s, &generated);
    n_choices_with_a_seed_repeat(&s);
    penalties_and_bias_change_the_choice(&s);
    stop_strings_straddle_tokens(&s);
    unsupported_fields_are_400(&s);
}

fn schemas_hold_whole_and_streamed(s: &Server) {
    for (k, schema) in schemas().iter().enumerate() {
        let messages =
            json!([{"role": "user", "content": "Describe a person or a place as JSON."}]);
        let format = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}});
        // Greedy, then sampled with three seeds (three choices at once).
        for (temperature, n) in [(0.0, 1), (1.0, 3)] {
            let body = json!({
                "model": "smollm2", "messages": messages, "max_tokens": 150,
                "temperature": temperature, "seed": k, "n": n, "response_format": format,
            });
            let whole = ok(s, CHAT, &body);
            for i in 0..n {
                assert_eq!(whole["choices"][i]["finish_reason"], "stop", "{whole}");
                validates(schema, &text_of(&whole, i));
            }
            let (texts, finishes) = streamed(s, CHAT, &body);
            assert_eq!(texts.len(), n);
            for (t, f) in texts.iter().zip(&finishes) {
                assert_eq!(f, "stop");
                validates(schema, t);
            }
        }
        // llama.cpp's `json_schema` field, on completions.
        let body = json!({
            "model": "smollm2", "prompt": "A JSON value:", "max_tokens": 150,
            "temperature": 0.7, "seed": 3, "json_schema": schema,
        });
        validates(schema, &text_of(&ok(s, TEXT, &body), 0));
    }
}

fn json_object_is_an_object(s: &Server) {
    let body = json!({
        "model": "smollm2", "max_tokens": 200, "temperature": 0,
        "messages": [{"role": "user", "content": "Reply with a JSON object with the keys name and age of a person."}],
        "response_format": {"type": "json_object"},
    });
    let whole = ok(s, CHAT, &body);
    let text = text_of(&whole, 0);
    assert_eq!(whole["choices"][0]["finish_reason"], "stop", "{whole}");
    let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert!(value.is_object(), "{text}");
}

fn grammars_hold(s: &Server) {
    let cases = [
        // GBNF, as llama.cpp's `grammar` takes it.
        (
            "root ::= answer \" \" [0-9] [0-9]?\nanswer ::= \"yes\" | \"no\"\n",
            r"^(yes|no) [0-9][0-9]?$",
        ),
        // llguidance's Lark.
        (
            "start: \"Answer: \" /[A-Z][a-z]{2,8}/",
            r"^Answer: [A-Z][a-z]{2,8}$",
        ),
    ];
    for (grammar, pattern) in cases {
        let re = regex_lite(pattern);
        for (temperature, seed) in [(0.0, 0), (1.0, 1), (1.5, 2)] {
            let body = json!({
                "model": "smollm2", "prompt": "Is the sky blue?", "max_tokens": 20,
                "temperature": temperature, "seed": seed, "grammar": grammar,
            });
            let whole = ok(s, TEXT, &body);
            let text = text_of(&whole, 0);
            assert!(re(&text), "{text:?} does not match {pattern}");
            assert_eq!(whole["choices"][0]["finish_reason"], "stop", "{whole}");
            let (texts, _) = streamed(s, TEXT, &body);
            assert!(re(&texts[0]), "{:?} does not match {pattern}", texts[0]);
        }
    }
    // A grammar that allows only the empty reply ends at once, cleanly.
    let body = json!({
        "model": "smollm2", "prompt": "Say something.", "max_tokens": 20,
        "temperature": 0, "grammar": "start: \"\"",
    });
    let whole = ok(s, TEXT, &body);
    assert_eq!(text_of(&whole, 0), "", "{whole}");
    assert_eq!(whole["choices"][0]["finish_reason"], "stop", "{whole}");
}

/// A matcher for the few regular expressions above (`^(a|b) ...$` forms),
/// through the schema validator's own `pattern` support.
fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool {
    let validator =
        jsonschema::validator_for(&json!({"type": "string", "pattern": pattern})).unwrap();
    move |text: &str| validator.is_valid(&json!(text))
}

fn bad_grammars_are_400(s: &Server) {
    let base = json!({"model": "smollm2", "prompt": "hi", "max_tokens": 5});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    refused(
        s,
        TEXT,
        &with("grammar", json!("root ::= (\"a\"")),
        "grammar",
    );
    refused(
        s,
        TEXT,
        &with("grammar", json!("start: undefined_rule")),
        "grammar",
    );
    refused(s, TEXT, &with("grammar", json!("")), "grammar");
    refused(
        s,
        TEXT,
        &with(
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}),
        ),
        "response_format",
    );
    refused(
        s,
        TEXT,
        &with(
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "x"}}),
        ),
        "response_format.json_schema.schema",
    );
    refused(
        s,
        TEXT,
        &with("response_format", json!({"type": "xml"})),
        "response_format.type",
    );
    let mut both = with("grammar", json!("start: \"a\""));
    both["json_schema"] = json!({"type": "object"});
    refused(s, TEXT, &both, "grammar");
    // A stream with a bad grammar is refused before it starts.
    let mut stream = with("grammar", json!("root ::= [z-a"));
    stream["stream"] = json!(true);
    refused(s, TEXT, &stream, "grammar");
    assert_eq!(s.get("/health").status, 200);
}

/// `radix generate --json --logits` of the chat message: its JSON.
fn generate_chat_with_logits(prompt: &str, n: usize) -> Value {
    let out = radix()
        .args([
            "generate",
            "--chat",
            "--json",
            "--logits",
            "--temperature",
            "0",
        ])
        .args(["--max-tokens", &n.to_string(), prompt])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).unwrap()
}

fn log_softmax(row: &[f64]) -> Vec<f64> {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let z = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    row.iter().map(|x| x - z).collect()
}

fn logprobs_are_the_log_softmax_of_the_logits(s: &Server) -> Value {
    let question = "What is 2+2?";
    let generated = generate_chat_with_logits(question, 6);
    let body = json!({
        "model": "smollm2", "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "user", "content": question}],
        "logprobs": true, "top_logprobs": 3,
    });
    let whole = ok(s, CHAT, &body);
    let content = whole["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .clone();
    let ids = generated["ids"].as_array().unwrap();
    let rows = generated["logits"].as_array().unwrap();
    assert_eq!(content.len(), ids.len(), "{whole}");
    for ((entry, id), row) in content.iter().zip(ids).zip(rows) {
        let row: Vec<f64> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let lps = log_softmax(&row);
        let id = id.as_u64().unwrap() as usize;
        let got = entry["logprob"].as_f64().unwrap();
        // The same model on the same CPU; the server's cache is longer.
        assert!((got - lps[id]).abs() < 2e-3, "{got} vs {}", lps[id]);
        let mut sorted = lps.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        for (t, want) in top.iter().zip(&sorted) {
            assert!(
                (t["logprob"].as_f64().unwrap() - want).abs() < 2e-3,
                "{entry}"
            );
        }
        // The token's text is the id's.
        let detok = ok(s, "/detokenize", &json!({"tokens": [id]}));
        let bytes: Vec<u8> = entry["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        if let Ok(text) = String::from_utf8(bytes) {
            assert_eq!(detok["content"], text);
        }
    }
    // Streamed chunks carry the same entries.
    let mut body = body;
    body["stream"] = json!(true);
    let conn = s.send("POST", CHAT, &[], &body.to_string());
    let events = read_events(&mut BufReader::new(conn), 1000);
    let streamed: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(streamed, content);
    // Completions' shape: tokens, token_logprobs, top_logprobs, text_offset.
    let text = ok(
        s,
        TEXT,
        &json!({"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 4,
                "temperature": 0, "logprobs": 2}),
    );
    let lp = &text["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 4, "{text}");
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 4);
    assert_eq!(
        lp["top_logprobs"][0].as_object().unwrap().len(),
        2,
        "{text}"
    );
    assert_eq!(lp["text_offset"][0], 0);
    let joined: String = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(joined, text_of(&text, 0));
    generated
}

fn text_utilities_agree(s: &Server, generated: &Value) {
    let t = ok(s, "/tokenize", &json!({"content": "Hello world, again"}));
    let ids = t["tokens"].clone();
    assert!(ids.as_array().unwrap().len() >= 3, "{t}");
    let d = ok(s, "/detokenize", &json!({"tokens": ids}));
    assert_eq!(d["content"], "Hello world, again");
    let p = ok(
        s,
        "/tokenize",
        &json!({"content": "Hello world, again", "with_pieces": true}),
    );
    let pieces: String = p["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["piece"].as_str().unwrap())
        .collect();
    assert_eq!(pieces, "Hello world, again");
    let a = ok(
        s,
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "What is 2+2?"}]}),
    );
    assert_eq!(a["prompt"], generated["prompt"]);
    let n = generated["prompt_ids"].as_array().unwrap().len();
    let t = ok(s, "/tokenize", &json!({"content": a["prompt"]}));
    assert_eq!(t["tokens"], generated["prompt_ids"], "{n} prompt tokens");
    refused(
        s,
        "/detokenize",
        &json!({"tokens": [1, 4_000_000_000u64]}),
        "tokens[1]",
    );
    refused(s, "/tokenize", &json!({"text": "hi"}), "text");
    refused(
        s,
        "/apply-template",
        &json!({"messages": [{"role": "robot", "content": "x"}]}),
        "messages[0].role",
    );
}

fn n_choices_with_a_seed_repeat(s: &Server) {
    let body = json!({
        "model": "smollm2", "prompt": "Once upon a time", "max_tokens": 12,
        "temperature": 1.0, "seed": 42, "n": 3,
    });
    let a = ok(s, TEXT, &body);
    let b = ok(s, TEXT, &body);
    let texts = |r: &Value| (0..3).map(|i| text_of(r, i)).collect::<Vec<_>>();
    assert_eq!(texts(&a), texts(&b));
    assert_eq!(a["choices"].as_array().unwrap().len(), 3);
    for i in 0..3 {
        assert_eq!(a["choices"][i]["index"], i);
    }
    let t = texts(&a);
    assert!(t[0] != t[1] || t[1] != t[2], "three equal draws: {t:?}");
    let (streamed, _) = streamed(s, TEXT, &body);
    assert_eq!(streamed, t);
    let mut other = body.clone();
    other["seed"] = json!(43);
    let other = ok(s, TEXT, &other);
    assert_ne!(texts(&other), t, "another seed draws the same");
}

/// Greedy completions of `prompt` with `extra` fields: the text and, per
/// token, its bytes and the top 20 (bytes, logprob).
fn greedy_with(s: &Server, prompt: &str, extra: Value) -> (String, Vec<TokenStep>) {
    let mut body = json!({
        "model": "smollm2", "max_tokens": 16, "temperature": 0,
        "messages": [{"role": "user", "content": prompt}],
        "logprobs": true, "top_logprobs": 20,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let a = ok(s, CHAT, &body);
    let steps = a["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| TokenStep {
            bytes: e["bytes"].clone(),
            logprob: e["logprob"].as_f64().unwrap(),
            top: e["top_logprobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (t["bytes"].clone(), t["logprob"].as_f64().unwrap()))
                .collect(),
        })
        .collect();
    (text_of(&a, 0), steps)
}

struct TokenStep {
    bytes: Value,
    logprob: f64,
    top: Vec<(Value, f64)>,
}

fn penalties_and_bias_change_the_choice(s: &Server) {
    let prompt = "Write a short poem about the sea.";
    let (plain, _) = greedy_with(s, prompt, json!({}));
    for (presence, frequency) in [(2.0, 0.0), (0.0, 1.5), (1.0, 1.0)] {
        let (text, steps) = greedy_with(
            s,
            prompt,
            json!({"presence_penalty": presence, "frequency_penalty": frequency}),
        );
        assert_ne!(
            text, plain,
            "presence {presence}, frequency {frequency} changed nothing"
        );
        // Each pick is the best listed token after the penalties of the
        // tokens before it (the raw log-probabilities differ from the
        // logits by one constant per step).
        let mut counts: HashMap<String, f64> = HashMap::new();
        for step in &steps {
            let score = |bytes: &Value, lp: f64| {
                let n = counts.get(&bytes.to_string()).copied().unwrap_or(0.0);
                lp - if n > 0.0 { presence } else { 0.0 } - frequency * n
            };
            let chosen = score(&step.bytes, step.logprob);
            for (b, lp) in &step.top {
                assert!(
                    score(b, *lp) <= chosen + 1e-4,
                    "{b} beats the pick {}",
                    step.bytes
                );
            }
            *counts.entry(step.bytes.to_string()).or_default() += 1.0;
        }
    }
    // repetition_penalty 1 is no penalty; 1.5 changes the reply.
    let (same, _) = greedy_with(s, prompt, json!({"repetition_penalty": 1.0}));
    assert_eq!(same, plain);
    let (text, _) = greedy_with(s, prompt, json!({"repetition_penalty": 1.5}));
    assert_ne!(text, plain);
    // min_p 1 keeps only the most likely token: sampling is greedy.
    let (text, _) = greedy_with(
        s,
        prompt,
        json!({"temperature": 1.5, "seed": 9, "min_p": 1.0}),
    );
    assert_eq!(text, plain);
    // A bias of 100 on a token makes it the first; -100 on the greedy
    // first token forbids it.
    let base = json!({"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 1, "temperature": 0});
    let first = text_of(&ok(s, TEXT, &base), 0);
    let london = ok(s, "/tokenize", &json!({"content": " London"}))["tokens"][0].clone();
    let mut biased = base.clone();
    biased["logit_bias"] = json!({ london.to_string(): 100 });
    assert_eq!(text_of(&ok(s, TEXT, &biased), 0), " London");
    let first_id = ok(s, "/tokenize", &json!({"content": first}))["tokens"][0].clone();
    biased["logit_bias"] = json!({ first_id.to_string(): -100 });
    assert_ne!(text_of(&ok(s, TEXT, &biased), 0), first);
}

fn stop_strings_straddle_tokens(s: &Server) {
    let base = json!({"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 12,
                      "temperature": 0, "logprobs": 0});
    let a = ok(s, TEXT, &base);
    let tokens: Vec<String> = a["choices"][0]["logprobs"]["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let full = text_of(&a, 0);
    // The first boundary whose two sides give a stop string found nowhere
    // earlier in the text.
    let mut before = String::new();
    let mut checked = false;
    for k in 1..tokens.len() {
        before.push_str(&tokens[k - 1]);
        let (Some(last), Some(first)) = (tokens[k - 1].chars().last(), tokens[k].chars().next())
        else {
            continue;
        };
        let stop = format!("{last}{first}");
        let cut = before.len() - last.len_utf8();
        if full.find(&stop) != Some(cut) {
            continue;
        }
        let mut body = base.clone();
        body["stop"] = json!([stop]);
        let got = ok(s, TEXT, &body);
        assert_eq!(text_of(&got, 0), full[..cut], "stop {stop:?}");
        assert_eq!(got["choices"][0]["finish_reason"], "stop");
        let (streamed, _) = streamed(s, TEXT, &body);
        assert_eq!(streamed[0], full[..cut]);
        checked = true;
        break;
    }
    assert!(checked, "no boundary to test in {tokens:?}");
}

fn unsupported_fields_are_400(s: &Server) {
    let chat = json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let with = |k: &str, v: Value| {
        let mut b = chat.clone();
        b[k] = v;
        b
    };
    refused(s, CHAT, &with("best_of", json!(2)), "best_of");
    refused(s, CHAT, &with("logprobs", json!(3)), "logprobs");
    refused(s, CHAT, &with("top_logprobs", json!(2)), "top_logprobs");
    let mut many = with("logprobs", json!(true));
    many["top_logprobs"] = json!(21);
    refused(s, CHAT, &many, "top_logprobs");
    refused(
        s,
        CHAT,
        &with("logit_bias", json!({"abc": 1})),
        "logit_bias.abc",
    );
    refused(
        s,
        CHAT,
        &with("logit_bias", json!({"5": 101})),
        "logit_bias.5",
    );
    refused(
        s,
        CHAT,
        &with("presence_penalty", json!(2.5)),
        "presence_penalty",
    );
    refused(
        s,
        CHAT,
        &with("repetition_penalty", json!(0)),
        "repetition_penalty",
    );
    refused(s, CHAT, &with("min_p", json!(1.5)), "min_p");
    refused(s, CHAT, &with("n", json!(0)), "n");
    refused(
        s,
        TEXT,
        &json!({"model": "smollm2", "prompt": "hi", "logprobs": true}),
        "logprobs",
    );
    refused(
        s,
        TEXT,
        &json!({"model": "smollm2", "prompt": "hi", "echo": true}),
        "echo",
    );
}

#[test]
fn the_default_context_takes_a_long_chat() {
    let s = Server::start(&["--embed-model", "none"]);
    let h = s.get("/health").json();
    // SmolLM2 was trained on 8,192 positions; 4 slots of f16 caches (the
    // default) in the default 512 MiB hold 4,096 each (46 KB a position).
    assert_eq!(h["context"], 4096, "{h}");
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(130);
    let a = ok(
        &s,
        CHAT,
        &json!({"model": "smollm2", "max_tokens": 2, "temperature": 0,
                "messages": [{"role": "user", "content": long}]}),
    );
    let n = a["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(n > 1300, "{n} prompt tokens");
}
