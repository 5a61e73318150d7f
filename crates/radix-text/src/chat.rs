//! Chat templates as models ship them: the Jinja template of
//! `tokenizer.chat_template` (GGUF metadata) or `tokenizer_config.json`,
//! rendered with `minijinja` the way transformers' `apply_chat_template`
//! renders it with jinja2 (`trim_blocks`, `lstrip_blocks`, loop controls,
//! Python string methods, `raise_exception`), given `messages`,
//! `add_generation_prompt`, `bos_token` and `eos_token`.
//!
//! A model that ships none gets the known template of its architecture
//! ([`ChatTemplate::known`]): ChatML for llama, qwen and the like, Gemma's turn
//! format for gemma; [`ChatTemplate::origin`] says which it is, so that the
//! caller can say so.

use std::collections::BTreeMap;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, ErrorKind, Value};

/// One message of a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// A chat template and the special tokens it is rendered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    source: String,
    origin: TemplateOrigin,
    bos_token: String,
    eos_token: String,
}

/// Where a [`ChatTemplate`] comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The model's file ships it.
    Shipped,
    /// The model ships none; this is the known template of its architecture.
    Known {
        /// The architecture (`general.architecture`).
        architecture: String,
        /// The template's name (`chatml`, `gemma`).
        name: &'static str,
    },
}

/// ChatML: `<|im_start|>{role}\n{content}<|im_end|>\n` per message.
const CHATML: &str = include_str!("templates/chatml.jinja");
/// Gemma's turns, as Gemma 3's `tokenizer_config.json` writes them: the
/// system message goes before the first user message, `assistant` is `model`.
const GEMMA: &str = include_str!("templates/gemma.jinja");

impl ChatMessage {
    /// A message from `role`.
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
        }
    }

    /// A `system` message.
    pub fn system(content: &str) -> Self {
        ChatMessage::new("system", content)
    }

    /// A `user` message.
    pub fn user(content: &str) -> Self {
        ChatMessage::new("user", content)
    }

    /// An `assistant` message.
    pub fn assistant(content: &str) -> Self {
        ChatMessage::new("assistant", content)
    }
}

impl ChatTemplate {
    /// The Jinja template `source`, shipped with the model, rendered with
    /// `bos_token` and `eos_token`.
    pub fn shipped(source: &str, bos_token: &str, eos_token: &str) -> Self {
        ChatTemplate {
            source: source.to_string(),
            origin: TemplateOrigin::Shipped,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        }
    }

    /// The known template of `architecture` (`general.architecture`), for a
    /// model that ships none: Gemma's turns for gemma, gemma2 and gemma3;
    /// ChatML for llama, qwen2, qwen3 and smollm; `None` for others.
    pub fn known(architecture: &str, bos_token: &str, eos_token: &str) -> Option<Self> {
        let (name, source) = match architecture {
            "gemma" | "gemma2" | "gemma3" => ("gemma", GEMMA),
            "llama" | "qwen2" | "qwen3" | "smollm" | "smollm3" => ("chatml", CHATML),
            _ => return None,
        };
        Some(ChatTemplate {
            source: source.to_string(),
            origin: TemplateOrigin::Known {
                architecture: architecture.to_string(),
                name,
            },
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the model shipped the template or it is a known one.
    pub fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    /// `messages` rendered, ending with the prompt of the assistant's reply
    /// when `add_generation_prompt` is set. `Err` (as a message) if the
    /// template does not parse or raises an exception.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                map([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ])
            })
            .collect();
        self.render_values(Value::from(messages), None, add_generation_prompt)
    }

    /// `messages` as OpenAI sends them (JSON objects: `role`, `content`,
    /// and `tool_calls` or `tool_call_id` where they are given) and the
    /// `tools` (OpenAI's list of functions) rendered, as transformers'
    /// `apply_chat_template(messages, tools=...)` renders them: a template
    /// that reads neither ignores them.
    pub fn render_json(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let messages = Value::from(messages.iter().map(from_json).collect::<Vec<_>>());
        self.render_values(messages, tools.map(from_json), add_generation_prompt)
    }

    fn render_values(
        &self,
        messages: Value,
        tools: Option<Value>,
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let env = environment().map_err(|e| format!("chat template: {e}"))?;
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| format!("chat template does not parse: {e}"))?;
        let ctx = map([
            ("messages", messages),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("bos_token", Value::from(self.bos_token.as_str())),
            ("eos_token", Value::from(self.eos_token.as_str())),
            ("tools", tools.unwrap_or(Value::from(()))),
        ]);
        template.render(ctx).map_err(|e| match e.kind() {
            ErrorKind::InvalidOperation if e.detail().is_some() => {
                format!("chat template: {}", e.detail().unwrap_or_default())
            }
            _ => format!("chat template: {e}"),
        })
    }
}

/// A JSON value as a Jinja value (objects keep their keys' order where
/// the Jinja map does).
fn from_json(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => Value::from(a.iter().map(from_json).collect::<Vec<_>>()),
        J::Object(o) => Value::from_pairs(o.iter().map(|(k, v)| (k.as_str(), from_json(v)))),
    }
}

/// A Jinja mapping of `entries`.
fn map<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::from(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<BTreeMap<String, Value>>(),
    )
}

/// A Jinja environment configured as transformers configures jinja2 for chat
/// templates.
fn environment() -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()?,
    );
    // `.strip()`, `.startswith()`, `.items()` and the other Python methods
    // templates call.
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> Result<Value, _> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
    });
    // Llama 3's templates write today's date.
    env.add_function("strftime_now", |format: String| -> Result<Value, _> {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        strftime(&format, secs).map(Value::from)
    });
    Ok(env)
}

/// Python's `strftime` of the UTC time `secs` after the epoch, for the
/// directives templates use (`%Y %y %m %d %e %H %M %S %b %B %a %A %j %%`).
fn strftime(format: &str, secs: u64) -> Result<String, minijinja::Error> {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = secs / 86_400;
    let (hour, minute, second) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Days to a civil date (Howard Hinnant's `civil_from_days`).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][month as usize - 1];
    let yday = before + day + i64::from(leap && month > 2);
    let month_name = MONTHS[month as usize - 1];
    let weekday = DAYS[(days % 7) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let piece = match chars.next() {
            Some('Y') => year.to_string(),
            Some('y') => format!("{:02}", year % 100),
            Some('m') => format!("{month:02}"),
            Some('d') => format!("{day:02}"),
            Some('e') => format!("{day:2}"),
            Some('H') => format!("{hour:02}"),
            Some('M') => format!("{minute:02}"),
            Some('S') => format!("{second:02}"),
            Some('b') => month_name[..3].to_string(),
            Some('B') => month_name.to_string(),
            Some('a') => weekday[..3].to_string(),
            Some('A') => weekday.to_string(),
            Some('j') => format!("{yday:03}"),
            Some('%') => "%".to_string(),
            other => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "strftime_now: unsupported directive %{}",
                        other.unwrap_or(' ')
                    ),
                ));
            }
        };
        out.push_str(&piece);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::strftime;

    #[test]
    fn strftime_formats_utc_dates_as_python_does() {
        // datetime.fromtimestamp(s, timezone.utc).strftime(...) in Python.
        let check = |secs, format, want: &str| assert_eq!(strftime(format, secs).unwrap(), want);
        check(
            0,
            "%d %b %Y %H:%M:%S %A %j",
            "01 Jan 1970 00:00:00 Thursday 001",
        );
        check(
            1_709_210_096,
            "%d %B %Y, %a %y %j %%",
            "29 February 2024, Thu 24 060 %",
        );
        check(1_796_256_000, "%Y-%m-%d %e", "2026-12-03  3");
        check(951_868_800, "%d %b %Y %j", "01 Mar 2000 061");
        assert!(strftime("%Q", 0).is_err());
    }
}
