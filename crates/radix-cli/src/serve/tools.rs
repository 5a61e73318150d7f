//! Tool calling: a request's `tools` reach the model's chat template (as
//! transformers' `apply_chat_template(tools=...)` passes them), the reply's
//! tool-call text is parsed into `message.tool_calls`, and `tool_choice:
//! "required"` or a named function is held through a grammar of the
//! calls. The text form of a call follows the template's family: Qwen and
//! Hermes `<tool_call>{"name", "arguments"}</tool_call>` (the default), Llama
//! 3's bare `{"name", "parameters"}`, Mistral's `[TOOL_CALLS][{"name",
//! "arguments"}, ...]`.

use radix_models::constraint::Grammar;
use serde_json::{Value, json};

use super::error::ApiError;

/// How a model writes its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
    Hermes,
    /// `{"name": ..., "parameters": {...}}`.
    Llama3,
    /// `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`.
    Mistral,
}

impl Format {
    /// The form the chat template `source` reads calls in.
    pub fn of_template(source: Option<&str>) -> Format {
        let source = source.unwrap_or("");
        if source.contains("[TOOL_CALLS]") {
            Format::Mistral
        } else if source.contains("<|python_tag|>") || source.contains("ipython") {
            Format::Llama3
        } else {
            Format::Hermes
        }
    }
}

/// What `tool_choice` asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// No call: the reply is text.
    None,
    /// The model decides.
    Auto,
    /// At least one call.
    Required,
    /// A call of this function.
    Named(String),
}

/// A request's tools, checked.
#[derive(Clone, Debug)]
pub struct Tools {
    /// The `tools` as sent (`{"type": "function", "function": {...}}`).
    pub list: Value,
    /// What `tool_choice` asks.
    pub choice: Choice,
    /// How the model writes calls.
    pub format: Format,
    /// Whether several calls may come in one reply.
    pub parallel: bool,
}

impl Tools {
    /// The tools of a request: `None` without `tools`; a 400 naming the
    /// field for a malformed tool, choice or an unknown name.
    pub fn check(
        tools: Option<&Vec<Value>>,
        choice: Option<&Value>,
        parallel: Option<bool>,
        format: Format,
    ) -> Result<Option<Tools>, ApiError> {
        let Some(tools) = tools else {
            if choice.is_some_and(|c| c != "none" && c != "auto") {
                return Err(ApiError::invalid("tool_choice", "tool_choice needs tools"));
            }
            return Ok(None);
        };
        let mut names = vec![];
        for (i, t) in tools.iter().enumerate() {
            let field = format!("tools[{i}]");
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::invalid(
                    &format!("{field}.type"),
                    "only tools of type \"function\"",
                ));
            }
            let name = t
                .pointer("/function/name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    ApiError::invalid(&format!("{field}.function.name"), "a function needs a name")
                })?;
            if let Some(p) = t.pointer("/function/parameters").filter(|p| !p.is_object()) {
                return Err(ApiError::invalid(
                    &format!("{field}.function.parameters"),
                    format!("parameters must be a JSON schema object, got {p}"),
                ));
            }
            names.push(name.to_string());
        }
        let choice = match choice {
            None => Choice::Auto,
            Some(Value::String(s)) if s == "auto" => Choice::Auto,
            Some(Value::String(s)) if s == "none" => Choice::None,
            Some(Value::String(s)) if s == "required" => Choice::Required,
            Some(c) => match c.pointer("/function/name").and_then(Value::as_str) {
                Some(n) if c.get("type").and_then(Value::as_str) == Some("function") => {
                    if !names.iter().any(|m| m == n) {
                        return Err(ApiError::invalid(
                            "tool_choice",
                            format!("no tool named {n:?} among the tools"),
                        ));
                    }
                    Choice::Named(n.to_string())
                }
                _ => {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        "tool_choice is \"none\", \"auto\", \"required\" or \
                         {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    ));
                }
            },
        };
        Ok(Some(Tools {
            list: Value::Array(tools.clone()),
            choice,
            format,
            parallel: parallel.unwrap_or(true),
        }))
    }

    /// The grammar that holds the reply to calls, for `required` or a
    /// named function (none otherwise: the model may answer in text).
    pub fn grammar(&self) -> Option<Grammar> {
        let names: Vec<&str> = match &self.choice {
            Choice::Required => self.functions().map(|(n, _)| n).collect(),
            Choice::Named(n) => vec![n.as_str()],
            Choice::None | Choice::Auto => return None,
        };
        let args_key = if self.format == Format::Llama3 {
            "parameters"
        } else {
            "arguments"
        };
        let calls: Vec<Value> = self
            .functions()
            .filter(|(n, _)| names.contains(n))
            .map(|(name, params)| {
                let params = params.cloned().unwrap_or(json!({"type": "object"}));
                json!({
                    "type": "object",
                    "properties": {"name": {"const": name}, args_key: params},
                    "required": ["name", args_key],
                    "additionalProperties": false
                })
            })
            .collect();
        let call = json!({"anyOf": calls, "x-guidance": {"whitespace_flexible": false}});
        let many = if self.parallel { "+" } else { "" };
        let lark = match self.format {
            Format::Hermes => format!(
                "start: (\"<tool_call>\\n\" call \"\\n</tool_call>\"){many}\ncall: %json {call}\n"
            ),
            Format::Llama3 => format!("start: call\ncall: %json {call}\n"),
            Format::Mistral => {
                let list = json!({"type": "array", "items": call, "minItems": 1,
                                  "maxItems": if self.parallel { 16 } else { 1 }});
                format!("start: \"[TOOL_CALLS]\" calls\ncalls: %json {list}\n")
            }
        };
        Some(Grammar::Grammar(lark))
    }

    /// Each function's name and parameters schema.
    fn functions(&self) -> impl Iterator<Item = (&str, Option<&Value>)> {
        self.list.as_array().into_iter().flatten().filter_map(|t| {
            let name = t.pointer("/function/name")?.as_str()?;
            Some((name, t.pointer("/function/parameters")))
        })
    }

    /// The reply's text as content and calls (OpenAI's `tool_calls`, each
    /// with an id from `id_base`): text that holds no call is all content.
    pub fn parse(&self, text: &str, id_base: &str) -> (Option<String>, Vec<Value>) {
        if self.choice == Choice::None {
            return (Some(text.to_string()), vec![]);
        }
        let (content, raw) = match self.format {
            Format::Hermes => hermes_calls(text),
            Format::Llama3 => {
                let body = text.trim().trim_start_matches("<|python_tag|>");
                match serde_json::from_str::<Value>(body) {
                    Ok(v) if v.is_object() => (String::new(), vec![v]),
                    _ => (text.to_string(), vec![]),
                }
            }
            Format::Mistral => match text.trim().strip_prefix("[TOOL_CALLS]") {
                Some(body) => match serde_json::from_str::<Vec<Value>>(body.trim()) {
                    Ok(v) => (String::new(), v),
                    Err(_) => (text.to_string(), vec![]),
                },
                None => (text.to_string(), vec![]),
            },
        };
        let calls: Vec<Value> = raw
            .into_iter()
            .filter_map(|c| {
                let name = c.get("name")?.as_str()?.to_string();
                let args = c
                    .get("arguments")
                    .or_else(|| c.get("parameters"))
                    .cloned()
                    .unwrap_or(json!({}));
                Some((name, args))
            })
            .enumerate()
            .map(|(i, (name, args))| {
                json!({
                    "id": format!("call_{id_base}_{i}"),
                    "type": "function",
                    "function": {"name": name, "arguments": args.to_string()},
                })
            })
            .collect();
        if calls.is_empty() {
            return (Some(text.to_string()), vec![]);
        }
        let content = content.trim();
        ((!content.is_empty()).then(|| content.to_string()), calls)
    }
}

/// Hermes calls: the JSON inside each `<tool_call>...</tool_call>`, and the
/// text outside them.
fn hermes_calls(text: &str) -> (String, Vec<Value>) {
    let mut content = String::new();
    let mut calls = vec![];
    let mut rest = text;
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    while let Some(start) = rest.find(OPEN) {
        let after = &rest[start + OPEN.len()..];
        let Some(end) = after.find(CLOSE) else {
            break;
        };
        let block_end = start + OPEN.len() + end + CLOSE.len();
        match serde_json::from_str::<Value>(after[..end].trim()) {
            Ok(v) => {
                content.push_str(&rest[..start]);
                calls.push(v);
            }
            // Not a call after all: it stays text.
            Err(_) => content.push_str(&rest[..block_end]),
        }
        rest = &rest[block_end..];
    }
    content.push_str(rest);
    (content, calls)
}

/// A message's `tool_calls` as templates read them: each function's
/// `arguments` as a JSON object rather than the string OpenAI sends
/// (as llama.cpp and vLLM hand them to templates).
pub fn calls_for_template(calls: &[Value]) -> Vec<Value> {
    calls
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if let Some(args) = c.pointer_mut("/function/arguments")
                && let Some(parsed) = args.as_str().and_then(|s| serde_json::from_str(s).ok())
            {
                *args = parsed;
            }
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(format: Format, choice: Choice) -> Tools {
        Tools {
            list: json!([{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]),
            choice,
            format,
            parallel: true,
        }
    }

    #[test]
    fn calls_parse_in_each_format() {
        let t = tools(Format::Hermes, Choice::Auto);
        let (content, calls) = t.parse(
            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            "7",
        );
        assert_eq!(content.as_deref(), Some("Let me look."));
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        assert_eq!(calls[0]["function"]["arguments"], "{\"city\":\"Paris\"}");
        assert_eq!(calls[0]["id"], "call_7_0");
        let (content, calls) = t.parse("No call here.", "7");
        assert_eq!(
            (content.as_deref(), calls.len()),
            (Some("No call here."), 0)
        );
        let t = tools(Format::Llama3, Choice::Auto);
        let (content, calls) = t.parse(
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
            "1",
        );
        assert_eq!((content, calls.len()), (None, 1));
        let t = tools(Format::Mistral, Choice::Auto);
        let (_, calls) = t.parse(
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]",
            "2",
        );
        assert_eq!(calls.len(), 2);
        let t = tools(Format::Hermes, Choice::None);
        assert!(
            t.parse("<tool_call>{\"name\": \"x\"}</tool_call>", "0")
                .1
                .is_empty()
        );
    }

    #[test]
    fn only_required_and_named_choices_hold_a_grammar() {
        assert!(tools(Format::Hermes, Choice::Auto).grammar().is_none());
        let Some(Grammar::Grammar(lark)) = tools(Format::Hermes, Choice::Required).grammar() else {
            panic!("no grammar");
        };
        assert!(
            lark.contains("<tool_call>") && lark.contains("get_weather"),
            "{lark}"
        );
        assert_eq!(
            Format::of_template(Some("{% if tools %}<tool_call>{% endif %}")),
            Format::Hermes
        );
        assert_eq!(Format::of_template(Some("[TOOL_CALLS]")), Format::Mistral);
    }
}
