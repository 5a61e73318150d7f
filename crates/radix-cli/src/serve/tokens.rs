//! llama-server's text utilities: `POST /tokenize` (text to the model's
//! token ids, with their pieces if asked), `POST /detokenize` (ids to
//! text) and `POST /apply-template` (chat messages to the prompt the chat
//! template makes of them), behind the API key as `/v1/...` is.

use serde::Deserialize;
use serde_json::json;

use super::api::{Message, parse};
use super::check::chat_prompt;
use super::error::{ApiError, axum_json};
use super::routes::{Body, Shared};
use axum::extract::State;
use axum::response::Response;

/// `POST /tokenize`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeRequest {
    /// The text.
    content: String,
    /// Add the special tokens the tokenizer adds (a BOS); default false.
    add_special: Option<bool>,
    /// Read special tokens' names in the text as those tokens: only true.
    parse_special: Option<bool>,
    /// Answer `{"id", "piece"}` objects rather than bare ids.
    with_pieces: Option<bool>,
}

/// `POST /detokenize`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeRequest {
    /// Token ids.
    tokens: Vec<u64>,
}

/// `POST /apply-template`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateRequest {
    /// The conversation.
    messages: Vec<Message>,
}

/// The ids of `content`, as `{"tokens": [...]}`.
pub async fn tokenize(State(s): Shared, body: Body) -> Result<Response, ApiError> {
    let req: TokenizeRequest = parse(body)?;
    if req.parse_special == Some(false) {
        return Err(ApiError::invalid(
            "parse_special",
            "special tokens' names are always read as those tokens: only parse_special: true",
        ));
    }
    let s2 = s.clone();
    let ids = tokio::task::spawn_blocking(move || {
        if req.add_special.unwrap_or(false) {
            s2.tokenizer.encode(&req.content)
        } else {
            s2.tokenizer.encode_without_added_tokens(&req.content)
        }
    })
    .await
    .map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))?
    .map_err(|e| ApiError::invalid("content", format!("cannot tokenize: {e}")))?;
    if req.with_pieces.unwrap_or(false) {
        let pieces: Vec<_> = ids
            .iter()
            .map(|&id| {
                let bytes = s.vocab.token_bytes(id);
                // A piece that is not whole UTF-8 comes as its bytes, as
                // llama-server sends it.
                match String::from_utf8(bytes) {
                    Ok(text) => json!({"id": id, "piece": text}),
                    Err(e) => json!({"id": id, "piece": e.into_bytes()}),
                }
            })
            .collect();
        return Ok(axum_json(&json!({ "tokens": pieces })));
    }
    Ok(axum_json(&json!({ "tokens": ids })))
}

/// The text of `tokens`, as `{"content": ...}`.
pub async fn detokenize(State(s): Shared, body: Body) -> Result<Response, ApiError> {
    let req: DetokenizeRequest = parse(body)?;
    let n = s.tokenizer.vocab_size();
    let ids = req
        .tokens
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            u32::try_from(id)
                .ok()
                .filter(|&id| (id as usize) < n)
                .ok_or_else(|| {
                    ApiError::invalid(
                        &format!("tokens[{i}]"),
                        format!("{id} is not a token id of the vocabulary (0 to {})", n - 1),
                    )
                })
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let text = s
        .tokenizer
        .decode(&ids)
        .map_err(|e| ApiError::invalid("tokens", format!("cannot decode: {e}")))?;
    Ok(axum_json(&json!({ "content": text })))
}

/// The prompt the chat template makes of `messages`, as `{"prompt": ...}`.
pub async fn apply_template(State(s): Shared, body: Body) -> Result<Response, ApiError> {
    let req: TemplateRequest = parse(body)?;
    let s2 = s.clone();
    let prompt =
        tokio::task::spawn_blocking(move || chat_prompt(&s2.tokenizer, &req.messages, None))
            .await
            .map_err(|e| ApiError::internal(format!("templating failed: {e}")))??;
    Ok(axum_json(&json!({ "prompt": prompt })))
}
