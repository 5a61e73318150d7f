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
        let env = environment().map_err(|e| format!("chat template: {e}"))?;
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| format!("chat template does not parse: {e}"))?;
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                map([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ])
            })
            .collect();
        let ctx = map([
            ("messages", Value::from(messages)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("bos_token", Value::from(self.bos_token.as_str())),
            ("eos_token", Value::from(self.eos_token.as_str())),
        ]);
        template.render(ctx).map_err(|e| match e.kind() {
            ErrorKind::InvalidOperation if e.detail().is_some() => {
                format!("chat template: {}", e.detail().unwrap_or_default())
            }
            _ => format!("chat template: {e}"),
        })
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
    Ok(env)
}
