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
use super::tools::Tools;
use super::worker::{Event, Finish, TokenLogprob};
use radix_models::constraint::Vocabulary;

/// How far a stream has come: choices not finished, tokens generated
/// (and prompt tokens the prompt cache held), and each choice's text
/// offset (in characters).
struct Progress {
    left: usize,
    tokens: usize,
    cached: usize,
    offsets: Vec<usize>,
    /// With tools, each choice's text, held until it ends to be read for
    /// calls.
    held: Vec<String>,
}

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
    /// How many choices (sequences) answer.
    pub choices: usize,
    /// Whether the tokens' log-probabilities are asked for.
    pub logprobs: bool,
    /// The vocabulary, for the tokens' text.
    pub vocab: Vocabulary,
    /// The tools the model may call: its text is read for calls.
    pub tools: Option<Tools>,
}

impl Reply {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Text, _) => "text_completion",
        }
    }

    /// The token counts: `cached_tokens` of the prompt's came from the
    /// prompt cache (the most any choice's sequence found).
    fn usage(&self, completion_tokens: usize, cached_tokens: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
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

    /// The text and bytes of token `id`.
    fn token(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.vocab.token_bytes(id);
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }

    /// The `logprobs` of a choice holding `tokens`, as the endpoint shapes
    /// it (`null` when not asked); a completion's `text_offset` counts from
    /// `offset` characters and moves it on.
    fn logprobs(&self, tokens: &[TokenLogprob], offset: &mut usize) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        match self.kind {
            Kind::Chat => {
                let entry = |id: u32, lp: f32| {
                    let (token, bytes) = self.token(id);
                    json!({"token": token, "logprob": lp, "bytes": bytes})
                };
                let content: Vec<Value> = tokens
                    .iter()
                    .map(|t| {
                        let mut e = entry(t.id, t.logprob);
                        e["top_logprobs"] = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
                        e
                    })
                    .collect();
                json!({"content": content, "refusal": null})
            }
            Kind::Text => {
                let mut texts = vec![];
                let mut offsets = vec![];
                let mut tops = vec![];
                for t in tokens {
                    let text = self.token(t.id).0;
                    offsets.push(*offset);
                    *offset += text.chars().count();
                    texts.push(text);
                    let top: serde_json::Map<String, Value> = t
                        .top
                        .iter()
                        .map(|&(id, lp)| (self.token(id).0, json!(lp)))
                        .collect();
                    tops.push(Value::Object(top));
                }
                let lps: Vec<f32> = tokens.iter().map(|t| t.logprob).collect();
                json!({
                    "tokens": texts,
                    "token_logprobs": lps,
                    "top_logprobs": tops,
                    "text_offset": offsets,
                })
            }
        }
    }

    /// A streamed chunk of choice `index`: `text` (or the assistant's
    /// role, for the first chat chunk) with its tokens' log-probabilities,
    /// and the finish reason at the end.
    fn chunk(
        &self,
        index: usize,
        text: Option<&str>,
        logprobs: Value,
        finish: Option<&str>,
    ) -> Value {
        let choice = match self.kind {
            Kind::Chat => {
                let delta = match text {
                    Some(t) => json!({"content": t}),
                    None if finish.is_none() => json!({"role": "assistant", "content": ""}),
                    None => json!({}),
                };
                json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
            Kind::Text => {
                json!({"index": index, "text": text.unwrap_or(""), "logprobs": logprobs, "finish_reason": finish})
            }
        };
        self.envelope(true, json!([choice]))
    }

    /// The text of choice `index` as content and tool calls (none when the
    /// request has no tools).
    fn calls(&self, index: usize, text: &str) -> (Option<String>, Vec<Value>) {
        match &self.tools {
            Some(t) => t.parse(text, &format!("{}_{index}", self.id)),
            None => (Some(text.to_string()), vec![]),
        }
    }

    /// The whole answer: every choice, and the tokens of all.
    fn whole(&self, choices: &[Choice]) -> Value {
        let list: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let mut finish = c.finish.map(Finish::as_str);
                let logprobs = self.logprobs(&c.logprobs, &mut 0);
                match self.kind {
                    Kind::Chat => {
                        let (content, calls) = self.calls(index, &c.text);
                        let mut message = json!({"role": "assistant", "content": content});
                        if !calls.is_empty() {
                            message["tool_calls"] = Value::Array(calls);
                            finish = Some("tool_calls");
                        }
                        json!({
                            "index": index,
                            "message": message,
                            "logprobs": logprobs,
                            "finish_reason": finish,
                        })
                    }
                    Kind::Text => {
                        json!({"index": index, "text": c.text, "logprobs": logprobs, "finish_reason": finish})
                    }
                }
            })
            .collect();
        let mut res = self.envelope(false, Value::Array(list));
        let completion = choices.iter().map(|c| c.completion_tokens).sum();
        let cached = choices.iter().map(|c| c.cached_tokens).max();
        res["usage"] = self.usage(completion, cached.unwrap_or(0));
        res
    }
}

/// One choice of a whole answer as it gathers.
#[derive(Default)]
struct Choice {
    text: String,
    logprobs: Vec<TokenLogprob>,
    finish: Option<Finish>,
    completion_tokens: usize,
    cached_tokens: usize,
}

/// Waits for every choice of the reply and answers them as one object.
pub async fn collect(
    reply: Reply,
    mut events: UnboundedReceiver<(usize, Event)>,
) -> Result<Response, ApiError> {
    let mut choices: Vec<Choice> = (0..reply.choices).map(|_| Choice::default()).collect();
    let mut left = reply.choices;
    while left > 0 {
        let Some((i, event)) = events.recv().await else {
            return Err(ApiError::internal("the generation thread stopped"));
        };
        let c = &mut choices[i];
        match event {
            Event::Text(t, lps) => {
                c.text.push_str(&t);
                c.logprobs.extend(lps);
            }
            Event::Done {
                finish,
                completion_tokens,
                cached_tokens,
            } => {
                c.finish = Some(finish);
                c.completion_tokens = completion_tokens;
                c.cached_tokens = cached_tokens;
                left -= 1;
            }
            Event::Failed(e) => return Err(ApiError::internal(e)),
        }
    }
    Ok(axum_json(&reply.whole(&choices)))
}

/// Streams the reply as server-sent events until its end or `deadline`.
pub fn stream(
    reply: Reply,
    events: UnboundedReceiver<(usize, Event)>,
    deadline: Instant,
    end: StreamEnd,
) -> Response {
    let mut pending = VecDeque::new();
    if reply.kind == Kind::Chat {
        for i in 0..reply.choices {
            pending.push_back(reply.chunk(i, None, Value::Null, None).to_string());
        }
    }
    let progress = Progress {
        left: reply.choices,
        tokens: 0,
        cached: 0,
        offsets: vec![0; reply.choices],
        held: vec![String::new(); reply.choices],
    };
    let state = (reply, events, pending, false, end.clone(), progress);
    let chunks = stream::unfold(
        state,
        move |(reply, mut events, mut pending, mut done, end, mut progress)| async move {
            loop {
                if let Some(data) = pending.pop_front() {
                    let event = SseEvent::default().data(data);
                    return Some((
                        Ok::<_, Infallible>(event),
                        (reply, events, pending, done, end, progress),
                    ));
                }
                if done {
                    return None;
                }
                done = true;
                let next = tokio::time::timeout_at(deadline, events.recv()).await;
                let failed = |e: ApiError| [e.body().to_string(), "[DONE]".into()];
                match next {
                    Ok(Some((i, Event::Text(t, _)))) if reply.tools.is_some() => {
                        progress.held[i].push_str(&t);
                        done = false;
                    }
                    Ok(Some((i, Event::Text(t, lps)))) => {
                        let lps = reply.logprobs(&lps, &mut progress.offsets[i]);
                        pending.push_back(reply.chunk(i, Some(&t), lps, None).to_string());
                        done = false;
                    }
                    Ok(Some((
                        i,
                        Event::Done {
                            finish,
                            completion_tokens,
                            cached_tokens,
                        },
                    ))) => {
                        let mut finish = finish.as_str();
                        if reply.tools.is_some() {
                            let held = std::mem::take(&mut progress.held[i]);
                            let (content, calls) = reply.calls(i, &held);
                            if let Some(text) = content.filter(|t| !t.is_empty()) {
                                pending.push_back(
                                    reply.chunk(i, Some(&text), Value::Null, None).to_string(),
                                );
                            }
                            if !calls.is_empty() {
                                finish = "tool_calls";
                                let calls: Vec<Value> = calls
                                    .into_iter()
                                    .enumerate()
                                    .map(|(k, mut c)| {
                                        c["index"] = json!(k);
                                        c
                                    })
                                    .collect();
                                let mut chunk = reply.chunk(i, Some(""), Value::Null, None);
                                chunk["choices"][0]["delta"] = json!({ "tool_calls": calls });
                                pending.push_back(chunk.to_string());
                            }
                        }
                        pending
                            .push_back(reply.chunk(i, None, Value::Null, Some(finish)).to_string());
                        progress.tokens += completion_tokens;
                        progress.cached = progress.cached.max(cached_tokens);
                        progress.left -= 1;
                        if progress.left > 0 {
                            done = false;
                            continue;
                        }
                        end.ended(200);
                        if reply.include_usage {
                            let mut usage = reply.envelope(true, json!([]));
                            usage["usage"] = reply.usage(progress.tokens, progress.cached);
                            pending.push_back(usage.to_string());
                        }
                        pending.push_back("[DONE]".into());
                    }
                    Ok(Some((_, Event::Failed(e)))) => {
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
