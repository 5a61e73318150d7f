//! The OpenAI request bodies radix reads, and how a body is parsed: malformed
//! JSON, a missing, unknown or mistyped field each answer 400 naming the
//! field (its path, such as `messages[0].content`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// `POST /v1/chat/completions` and `POST /v1/completions` (one has
/// `messages`, the other `prompt`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionRequest {
    /// The model's name as served.
    pub model: String,
    /// The conversation (chat).
    pub messages: Option<Vec<Message>>,
    /// The text to continue (completions).
    pub prompt: Option<Prompt>,
    /// The most tokens to generate (default: to the end of the context).
    pub max_tokens: Option<u64>,
    /// The newer name of `max_tokens`.
    pub max_completion_tokens: Option<u64>,
    /// 0 is greedy; default 1.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Sample among the K most likely tokens only (llama.cpp, vLLM).
    pub top_k: Option<u64>,
    /// Seed of the sampler (default: from the clock).
    pub seed: Option<u64>,
    /// Text that ends the reply (not included), up to 4.
    pub stop: Option<Stop>,
    /// Server-sent events instead of one object.
    pub stream: Option<bool>,
    /// `{"include_usage": true}` adds a last chunk with the counts.
    pub stream_options: Option<StreamOptions>,
    /// Choices per request (each its own sequence; with a seed, choice
    /// `i` draws with seed + `i`).
    pub n: Option<u64>,
    /// Lowers once the logit of every token the reply holds, in [-2, 2].
    pub presence_penalty: Option<f64>,
    /// Lowers a token's logit once per time the reply holds it, in [-2, 2].
    pub frequency_penalty: Option<f64>,
    /// Divides the positive logits (multiplies the negative ones) of the
    /// tokens of the prompt and the reply (vLLM, llama.cpp); 1 is none.
    pub repetition_penalty: Option<f64>,
    /// Keep only tokens at least this fraction as likely as the most
    /// likely one (llama.cpp, vLLM).
    pub min_p: Option<f64>,
    /// Token id (as a string) to a bias in [-100, 100] added to its logit.
    pub logit_bias: Option<std::collections::HashMap<String, f64>>,
    /// Chat: `true` for the log-probability of each token; completions: how
    /// many most likely tokens to list with each (0 to 20).
    pub logprobs: Option<Logprobs>,
    /// Chat: how many most likely tokens to list with each (0 to 20).
    pub top_logprobs: Option<u64>,
    /// `{"type": "text" | "json_object" | "json_schema", "json_schema":
    /// {"name", "schema", "strict"}}`: the reply follows it.
    pub response_format: Option<ResponseFormat>,
    /// llama.cpp's `json_schema`: a JSON schema the reply follows.
    pub json_schema: Option<serde_json::Value>,
    /// llama.cpp's `grammar`: a GBNF grammar (or llguidance's Lark) the
    /// reply follows.
    pub grammar: Option<String>,
    /// Functions the model may call (`{"type": "function", "function":
    /// {"name", "description", "parameters"}}`), passed to its template.
    pub tools: Option<Vec<serde_json::Value>>,
    /// `none`, `auto`, `required` or `{"type": "function", "function":
    /// {"name"}}`.
    pub tool_choice: Option<serde_json::Value>,
    /// Whether a reply may call several tools (default true).
    pub parallel_tool_calls: Option<bool>,
    /// llama.cpp's `cache_prompt`: whether the prompt may start from the
    /// prompt cache and is kept there (default true). `false` runs every
    /// token of it, as `radix generate` does: with 8-bit activations, a
    /// token run in another step may round its activations otherwise.
    pub cache_prompt: Option<bool>,
    /// The caller's end user (ignored).
    #[expect(dead_code, reason = "accepted as OpenAI does, and ignored")]
    pub user: Option<String>,
}

/// `logprobs`: a flag (chat) or a count (completions).
#[derive(Deserialize, Clone, Copy)]
#[serde(untagged)]
pub enum Logprobs {
    /// Chat's form.
    Flag(bool),
    /// Completions' form: how many most likely tokens to list.
    Count(u64),
}

/// `response_format`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The schema, for `json_schema`.
    pub json_schema: Option<JsonSchemaFormat>,
}

/// `response_format.json_schema`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonSchemaFormat {
    /// The schema's name.
    #[expect(dead_code, reason = "accepted as OpenAI does; names nothing here")]
    pub name: Option<String>,
    /// What the schema is for.
    #[expect(dead_code, reason = "accepted as OpenAI does; the model is not told")]
    pub description: Option<String>,
    /// The JSON schema.
    pub schema: Option<serde_json::Value>,
    /// Whether to follow the schema exactly: it always is.
    pub strict: Option<bool>,
}

/// One chat message.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text (none for an assistant's message of tool calls).
    pub content: Option<Content>,
    /// An assistant's calls of tools.
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// Which call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// The speaker's name (ignored).
    #[expect(dead_code, reason = "accepted as OpenAI does, and ignored")]
    pub name: Option<String>,
}

/// A message's content: a string or a list of text parts.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// `[{"type": "text", "text": ...}, ...]`.
    Parts(Vec<Part>),
}

/// One part of a message's content.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    /// Only `text`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text.
    pub text: String,
}

/// A completion's prompt: a string or a list of one string.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// The text.
    Text(String),
    /// Several prompts (only one is served).
    Texts(Vec<String>),
}

/// `stop`: one string or several.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    /// Add a last chunk with the token counts.
    pub include_usage: Option<bool>,
}

/// `POST /v1/embeddings`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingRequest {
    /// The model's name as served.
    pub model: String,
    /// A text or a list of texts.
    pub input: Prompt,
    /// `float` (default) or `base64` (little-endian f32).
    pub encoding_format: Option<String>,
    /// Not supported: only the model's own.
    pub dimensions: Option<u64>,
    /// Whether a text longer than the model reads is cut to its length
    /// (default: refused, 400), as Text Embeddings Inference and vLLM say it.
    pub truncate: Option<bool>,
    /// The caller's end user (ignored).
    #[expect(dead_code, reason = "accepted as OpenAI does, and ignored")]
    pub user: Option<String>,
}

impl Message {
    /// The text of the content, its parts joined (empty when there is none).
    pub fn text(&self, i: usize) -> Result<String, ApiError> {
        match &self.content {
            None => Ok(String::new()),
            Some(Content::Text(t)) => Ok(t.clone()),
            Some(Content::Parts(parts)) => parts
                .iter()
                .enumerate()
                .map(|(j, p)| match p.kind.as_str() {
                    "text" => Ok(p.text.as_str()),
                    other => Err(ApiError::invalid(
                        &format!("messages[{i}].content[{j}].type"),
                        format!("content parts of type {other:?} are not supported, only \"text\""),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|t| t.concat()),
        }
    }
}

/// The body as a `T`. A body over the size limit answers 413; bytes that
/// are not JSON, 400; a field that is missing, unknown or of the wrong type,
/// 400 naming it.
pub fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|r| ApiError::new(r.status(), r.body_text()))?;
    let de = &mut serde_json::Deserializer::from_slice(&body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::new(
                axum::http::StatusCode::BAD_REQUEST,
                format!("the body is not valid JSON: {inner}"),
            );
        }
        // At the top level serde names the field in backticks: "missing
        // field `model`", "unknown field `foo`, expected one of ...".
        let param = if path == "." {
            let msg = inner.to_string();
            msg.split('`').nth(1).unwrap_or("").to_string()
        } else {
            path
        };
        let msg = inner.to_string();
        let msg = match msg.strip_prefix("data did not match any variant of untagged enum ") {
            Some("Content") => "expected a string or a list of text parts",
            Some("Logprobs") => "expected true/false or a count",
            Some(_) => "expected a string or a list of strings",
            None => msg.split(" at line ").next().unwrap_or(&msg),
        };
        ApiError::invalid(&param, format!("{param}: {msg}"))
    })
}
