//! Tool calling through `radix serve` (the release build) on the tiny
//! random Qwen2 model, given a chat template that reads `tools` and tool
//! messages (Hermes `<tool_call>` form): the tools reach the template;
//! `tool_choice: "required"` or a named function comes back as
//! `message.tool_calls` whose arguments validate against the function's
//! parameters (the `jsonschema` crate), whole and streamed; a second turn
//! with the tool's result completes; malformed tools are 400s naming the
//! field.

mod common;

use std::io::BufReader;
use std::path::Path;

use common::server::{Server, read_events};
use serde_json::{Value, json};

const CHAT: &str = "/v1/chat/completions";

/// A short Hermes-style template (the tiny model's context is 256
/// positions, and its vocabulary spells most text byte by byte).
const TEMPLATE: &str = r#"{%- if tools %}<tools>{% for t in tools %}{{ t.function.name }}{{ t.function.parameters.properties | list }} {% endfor %}</tools>
{% endif %}
{%- for m in messages %}
{%- if m.role == "assistant" and m.tool_calls %}A:{% for c in m.tool_calls %}<tool_call>{"name":"{{ c.function.name }}","arguments":{{ c.function.arguments | tojson }}}</tool_call>{% endfor %}
{% elif m.role == "tool" %}T:{{ m.content }}
{% else %}{{ m.role }}:{{ m.content }}
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}A:{% endif %}"#;

/// The tiny Qwen2 folder with [`TEMPLATE`] as its chat template.
fn qwen2_with_tools_template(dir: &Path) {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../radix-models/tests/fixtures/tiny/qwen2");
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let config_path = dir.join("tokenizer_config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["chat_template"] = json!(TEMPLATE);
    std::fs::write(&config_path, config.to_string()).unwrap();
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "w", "parameters": {
            "type": "object",
            "properties": {"c": {"type": "string", "maxLength": 4}},
            "required": ["c"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "t", "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
            "required": ["n"], "additionalProperties": false}}}
    ])
}

fn ok(s: &Server, body: &Value) -> Value {
    let a = s.post(CHAT, &body.to_string());
    assert_eq!(a.status, 200, "{body}: {}", a.body);
    a.json()
}

/// Checks that `calls` are calls of the tools with valid arguments: the
/// names called.
fn valid_calls(calls: &Value) -> Vec<String> {
    let tools = tools();
    let calls = calls
        .as_array()
        .unwrap_or_else(|| panic!("no tool_calls: {calls}"));
    assert!(!calls.is_empty());
    calls
        .iter()
        .map(|c| {
            assert_eq!(c["type"], "function", "{c}");
            assert!(c["id"].as_str().is_some_and(|id| !id.is_empty()), "{c}");
            let name = c["function"]["name"].as_str().unwrap();
            let tool = tools
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["function"]["name"] == name)
                .unwrap_or_else(|| panic!("{name} is no tool"));
            let args: Value = serde_json::from_str(c["function"]["arguments"].as_str().unwrap())
                .unwrap_or_else(|e| panic!("{e}: {c}"));
            let v = jsonschema::validator_for(&tool["function"]["parameters"]).unwrap();
            assert!(v.is_valid(&args), "{args} against {tool}");
            name.to_string()
        })
        .collect()
}

#[test]
fn tool_calls_on_a_tiny_qwen() {
    let dir = tempfile::tempdir().unwrap();
    qwen2_with_tools_template(dir.path());
    let model = dir.path().to_str().unwrap();
    let s = Server::start(&["--model", model, "--embed-model", "none"]);
    let user = json!([{"role": "user", "content": "hi"}]);
    let plain = ok(
        &s,
        &json!({"model": model, "messages": user, "max_tokens": 4}),
    );
    let with_tools = ok(
        &s,
        &json!({"model": model, "messages": user, "max_tokens": 4, "tools": tools(), "tool_choice": "none"}),
    );
    let (a, b) = (
        plain["usage"]["prompt_tokens"].as_u64().unwrap(),
        with_tools["usage"]["prompt_tokens"].as_u64().unwrap(),
    );
    assert!(
        b > a + 20,
        "the tools did not reach the template: {a} vs {b} tokens"
    );
    for seed in 0..3 {
        let body = json!({
            "model": model, "messages": user, "max_tokens": 120, "temperature": 1.0,
            "seed": seed, "tools": tools(), "tool_choice": "required",
        });
        let r = ok(&s, &body);
        let choice = &r["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{r}");
        valid_calls(&choice["message"]["tool_calls"]);
        // Streamed: one delta of calls, then the finish reason.
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let conn = s.send("POST", CHAT, &[], &streamed.to_string());
        let events = read_events(&mut BufReader::new(conn), 1000);
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let calls = chunks
            .iter()
            .find_map(|c| c["choices"][0]["delta"].get("tool_calls").cloned())
            .unwrap_or_else(|| panic!("no tool_calls delta: {events:?}"));
        valid_calls(&calls);
        assert!(
            chunks
                .iter()
                .any(|c| c["choices"][0]["finish_reason"] == "tool_calls")
        );
    }
    // A named function is the one called.
    let r = ok(
        &s,
        &json!({"model": model, "messages": user, "max_tokens": 120, "temperature": 1.0, "seed": 5,
                "tools": tools(), "parallel_tool_calls": false,
                "tool_choice": {"type": "function", "function": {"name": "t"}}}),
    );
    assert_eq!(
        valid_calls(&r["choices"][0]["message"]["tool_calls"]),
        ["t"]
    );
    // The second turn, with the tool's result, completes.
    let call = r["choices"][0]["message"]["tool_calls"][0].clone();
    let second = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "42"}
    ]);
    let r = ok(
        &s,
        &json!({"model": model, "messages": second, "max_tokens": 8, "tools": tools()}),
    );
    assert!(
        r["choices"][0]["message"]["content"].is_string()
            || r["choices"][0]["message"]["tool_calls"].is_array(),
        "{r}"
    );
    assert!(r["usage"]["prompt_tokens"].as_u64().unwrap() > b, "{r}");
    // Malformed tools and choices are 400s naming the field.
    for (body, param) in [
        (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
        (
            json!({"tools": [{"type": "function", "function": {}}]}),
            "tools[0].function.name",
        ),
        (
            json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
        ),
        (
            json!({"tools": tools(), "tool_choice": "always"}),
            "tool_choice",
        ),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tools": tools(), "tool_choice": "required", "grammar": "start: \"a\""}),
            "grammar",
        ),
    ] {
        let mut b = json!({"model": model, "messages": user, "max_tokens": 4});
        for (k, v) in body.as_object().unwrap() {
            b[k] = v.clone();
        }
        let a = s.post(CHAT, &b.to_string());
        assert_eq!(a.status, 400, "{b}: {}", a.body);
        assert_eq!(a.json()["error"]["param"], param, "{b}: {}", a.body);
    }
}
