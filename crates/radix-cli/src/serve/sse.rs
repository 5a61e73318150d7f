//! The answer of a completion, whole or as server-sent events: one
//! `data: {...}` chunk per piece of text, a last chunk with the finish
//! reason (and, when asked, one with the token counts), then `data: [DONE]`.
//! A client that leaves drops the stream, which closes the job's channel:
//! the worker then frees the sequence's slot.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use super::error::{ApiError, axum_json};
use super::worker::Event;

/// Which endpoint answers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// What every chunk of one answer repeats.
pub struct Reply {
    /// `chatcmpl-N` or `cmpl-N`.
    pub id: String,
    /// The model's name as served.
    pub model: String,
    /// Unix seconds.
    pub created: u64,
    /// Chat or text.
    pub kind: Kind,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Whether the stream ends with a chunk of token counts.
    pub include_usage: bool,
}

impl Reply {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Text, _) => "text_completion",
        }
    }

    fn usage(&self, completion_tokens: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        })
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        })
    }

    /// A streamed chunk: `text` (or the assistant's role, for the first
    /// chat chunk) and the finish reason at the end.
    fn chunk(&self, text: Option<&str>, finish: Option<&str>) -> Value {
        let choice = match self.kind {
            Kind::Chat => {
                let delta = match text {
                    Some(t) => json!({"content": t}),
                    None if finish.is_none() => json!({"role": "assistant", "content": ""}),
                    None => json!({}),
                };
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Kind::Text => {
                json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
            }
        };
        self.envelope(true, json!([choice]))
    }

    /// The whole answer.
    fn whole(&self, text: &str, finish: &str, completion_tokens: usize) -> Value {
        let choice = match self.kind {
            Kind::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": finish,
            }),
            Kind::Text => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
            }
        };
        let mut res = self.envelope(false, json!([choice]));
        res["usage"] = self.usage(completion_tokens);
        res
    }
}

/// Waits for the whole reply and answers it as one object.
pub async fn collect(
    reply: Reply,
    mut events: UnboundedReceiver<Event>,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    loop {
        match events.recv().await {
            Some(Event::Text(t)) => text.push_str(&t),
            Some(Event::Done {
                finish,
                completion_tokens,
            }) => {
                return Ok(axum_json(&reply.whole(
                    &text,
                    finish.as_str(),
                    completion_tokens,
                )));
            }
            Some(Event::Failed(e)) => return Err(ApiError::internal(e)),
            None => return Err(ApiError::internal("the generation thread stopped")),
        }
    }
}

/// Streams the reply as server-sent events.
pub fn stream(reply: Reply, events: UnboundedReceiver<Event>) -> Response {
    let mut pending = VecDeque::new();
    if reply.kind == Kind::Chat {
        pending.push_back(reply.chunk(None, None).to_string());
    }
    let state = (reply, events, pending, false);
    let chunks = stream::unfold(
        state,
        |(reply, mut events, mut pending, mut done)| async move {
            loop {
                if let Some(data) = pending.pop_front() {
                    let event = SseEvent::default().data(data);
                    return Some((Ok::<_, Infallible>(event), (reply, events, pending, done)));
                }
                if done {
                    return None;
                }
                done = true;
                match events.recv().await {
                    Some(Event::Text(t)) => {
                        pending.push_back(reply.chunk(Some(&t), None).to_string());
                        done = false;
                    }
                    Some(Event::Done {
                        finish,
                        completion_tokens,
                    }) => {
                        pending.push_back(reply.chunk(None, Some(finish.as_str())).to_string());
                        if reply.include_usage {
                            let mut usage = reply.envelope(true, json!([]));
                            usage["usage"] = reply.usage(completion_tokens);
                            pending.push_back(usage.to_string());
                        }
                        pending.push_back("[DONE]".into());
                    }
                    Some(Event::Failed(e)) => {
                        pending.push_back(ApiError::internal(e).body().to_string());
                        pending.push_back("[DONE]".into());
                    }
                    None => pending.push_back(
                        ApiError::internal("the generation thread stopped")
                            .body()
                            .to_string(),
                    ),
                }
            }
        },
    );
    Sse::new(chunks)
        .keep_alive(KeepAlive::default())
        .into_response()
}
