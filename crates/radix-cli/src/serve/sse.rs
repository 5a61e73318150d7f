//! The answer of a completion, whole or as server-sent events: one
//! `data: {...}` chunk per piece of text, a last chunk with the finish
//! reason (and, when asked, one with the token counts), then `data: [DONE]`.
//! A client that leaves drops the stream, which closes the job's channel:
//! the worker then frees the sequence's slot.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::conn::InFlightGuard;
use super::error::{ApiError, axum_json};
use super::metrics::Metrics;
use super::routes::timed_out;
use super::worker::Event;

/// Which endpoint answers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

impl Kind {
    /// The endpoint's path.
    pub fn route(self) -> &'static str {
        match self {
            Kind::Chat => "/v1/chat/completions",
            Kind::Text => "/v1/completions",
        }
    }
}

/// Counts a streamed answer when it ends, by how it ended: 200 when it
/// finished, 500 when generation failed, 504 past `--request-timeout`, 499
/// when the client left first (nginx's code). Until then the request counts
/// as in flight. Also marks the response, so that the route counter leaves
/// it to this.
#[derive(Clone)]
pub struct StreamEnd(Arc<StreamEndInner>);

struct StreamEndInner {
    metrics: Arc<Metrics>,
    route: &'static str,
    status: std::sync::atomic::AtomicU16,
    timeout: Duration,
    _in_flight: InFlightGuard,
}

impl StreamEnd {
    /// The end of a stream on `route`, in flight until dropped.
    pub fn new(
        metrics: Arc<Metrics>,
        route: &'static str,
        in_flight: InFlightGuard,
        timeout: Duration,
    ) -> StreamEnd {
        StreamEnd(Arc::new(StreamEndInner {
            metrics,
            route,
            status: 499.into(),
            timeout,
            _in_flight: in_flight,
        }))
    }

    fn ended(&self, status: u16) {
        self.0
            .status
            .store(status, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for StreamEndInner {
    fn drop(&mut self) {
        let status = self.status.load(std::sync::atomic::Ordering::Relaxed);
        self.metrics.request(self.route, status);
    }
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

/// Streams the reply as server-sent events until its end or `deadline`.
pub fn stream(
    reply: Reply,
    events: UnboundedReceiver<Event>,
    deadline: Instant,
    end: StreamEnd,
) -> Response {
    let mut pending = VecDeque::new();
    if reply.kind == Kind::Chat {
        pending.push_back(reply.chunk(None, None).to_string());
    }
    let state = (reply, events, pending, false, end.clone());
    let chunks = stream::unfold(
        state,
        move |(reply, mut events, mut pending, mut done, end)| async move {
            loop {
                if let Some(data) = pending.pop_front() {
                    let event = SseEvent::default().data(data);
                    return Some((
                        Ok::<_, Infallible>(event),
                        (reply, events, pending, done, end),
                    ));
                }
                if done {
                    return None;
                }
                done = true;
                let next = tokio::time::timeout_at(deadline, events.recv()).await;
                let failed = |e: ApiError| [e.body().to_string(), "[DONE]".into()];
                match next {
                    Ok(Some(Event::Text(t))) => {
                        pending.push_back(reply.chunk(Some(&t), None).to_string());
                        done = false;
                    }
                    Ok(Some(Event::Done {
                        finish,
                        completion_tokens,
                    })) => {
                        end.ended(200);
                        pending.push_back(reply.chunk(None, Some(finish.as_str())).to_string());
                        if reply.include_usage {
                            let mut usage = reply.envelope(true, json!([]));
                            usage["usage"] = reply.usage(completion_tokens);
                            pending.push_back(usage.to_string());
                        }
                        pending.push_back("[DONE]".into());
                    }
                    Ok(Some(Event::Failed(e))) => {
                        end.ended(500);
                        pending.extend(failed(ApiError::internal(e)));
                    }
                    Ok(None) => {
                        end.ended(500);
                        pending.extend(failed(ApiError::internal("the generation thread stopped")));
                    }
                    Err(_) => {
                        end.ended(504);
                        pending.extend(failed(timed_out(end.0.timeout)));
                    }
                }
            }
        },
    );
    let mut res = Sse::new(chunks)
        .keep_alive(KeepAlive::default())
        .into_response();
    res.extensions_mut().insert(end);
    res
}
