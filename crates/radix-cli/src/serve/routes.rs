//! The routes: what each endpoint checks, and the job or answer it makes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use radix_models::sampling::Sampler;
use radix_text::{ChatMessage, Tokenizer};
use serde_json::json;

use super::api::{CompletionRequest, EmbeddingRequest, Prompt, Stop, parse};
use super::embeddings::Embeddings;
use super::error::{ApiError, axum_json};
use super::metrics::Metrics;
use super::sse::{self, Kind, Reply};
use super::worker::{Event, Job, Refused, Worker};

/// The largest request body read; a larger one answers 413.
pub const BODY_LIMIT: usize = 1 << 20;

/// What every route shares.
pub struct AppState {
    /// The language model's name, as requests must give it.
    pub model: String,
    /// The embedding model's name, if one is served.
    pub embed_model: Option<String>,
    /// The language model's tokenizer.
    pub tokenizer: Tokenizer,
    /// Positions per sequence.
    pub context: usize,
    /// Sequences at once.
    pub max_batch: usize,
    /// Requests waiting at most.
    pub max_queue: usize,
    /// The generation thread.
    pub worker: Worker,
    /// The embedding thread.
    pub embeddings: Option<Embeddings>,
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// The bearer token `/v1/...` needs.
    pub api_key: Option<String>,
    /// Numbers the answers' ids.
    pub next_id: AtomicU64,
}

type Shared = State<Arc<AppState>>;
type Body = Result<Bytes, BytesRejection>;

/// Every route, with the API key check on `/v1/...`, the body limit and the
/// request counter.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

/// The routes counted by name; others count as `other`.
const ROUTES: [&str; 6] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/models",
    "/health",
    "/metrics",
];

async fn count(State(s): Shared, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let route = ROUTES
        .iter()
        .find(|r| **r == path)
        .copied()
        .unwrap_or("other");
    let res = next.run(req).await;
    s.metrics.request(route, res.status().as_u16());
    res
}

async fn authorize(State(s): Shared, req: Request, next: Next) -> Response {
    if let Some(key) = &s.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(key.as_str()) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", req.method(), req.uri().path()),
    )
}

async fn health(State(s): Shared) -> Response {
    axum_json(&json!({
        "status": "ok",
        "model": s.model,
        "embed_model": s.embed_model,
        "context": s.context,
        "max_batch": s.max_batch,
        "max_queue": s.max_queue,
        "prefill_buckets": s.worker.prefill_buckets,
        "decode_batch_sizes": s.worker.decode_buckets,
    }))
}

async fn metrics(State(s): Shared) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

async fn models(State(s): Shared) -> Response {
    let data: Vec<_> = std::iter::once(&s.model)
        .chain(&s.embed_model)
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "radix"}))
        .collect();
    axum_json(&json!({"object": "list", "data": data}))
}

async fn chat(State(s): Shared, body: Body) -> Result<Response, ApiError> {
    complete(&s, parse(body)?, Kind::Chat).await
}

async fn completions(State(s): Shared, body: Body) -> Result<Response, ApiError> {
    complete(&s, parse(body)?, Kind::Text).await
}

/// Checks a completion request, queues it and answers.
async fn complete(s: &AppState, req: CompletionRequest, kind: Kind) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    if req.model != s.model {
        return Err(unknown_model(&req.model, &s.model));
    }
    let (text, field) = prompt_text(&s.tokenizer, &req, kind)?;
    let prompt = s
        .tokenizer
        .encode(&text)
        .map_err(|e| ApiError::invalid(field, format!("cannot tokenize the prompt: {e}")))?;
    if prompt.is_empty() {
        return Err(ApiError::invalid(field, "the prompt is empty"));
    }
    if prompt.len() >= s.context {
        return Err(ApiError::invalid(
            field,
            format!(
                "the prompt is {} tokens, which leaves no room in the context of {} tokens",
                prompt.len(),
                s.context
            ),
        ));
    }
    let max_tokens = match req.max_tokens.or(req.max_completion_tokens) {
        Some(0) => {
            return Err(ApiError::invalid(
                "max_tokens",
                "max_tokens must be at least 1",
            ));
        }
        Some(m) if prompt.len() as u64 + m > s.context as u64 => {
            return Err(ApiError::invalid(
                "max_tokens",
                format!(
                    "the prompt ({} tokens) and max_tokens ({m}) exceed the context of {} tokens",
                    prompt.len(),
                    s.context
                ),
            ));
        }
        Some(m) => m as usize,
        None => s.context - prompt.len(),
    };
    let sampler = sampler(&req)?;
    let stop = match req.stop {
        None => vec![],
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) if v.len() > 4 => {
            return Err(ApiError::invalid("stop", "at most 4 stop sequences"));
        }
        Some(Stop::Many(v)) => v,
    };
    if req.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("n", "only n = 1 is supported"));
    }
    for (name, v) in [
        ("presence_penalty", req.presence_penalty),
        ("frequency_penalty", req.frequency_penalty),
    ] {
        if v.is_some_and(|v| v != 0.0) {
            return Err(ApiError::invalid(
                name,
                format!("{name} is not supported (only 0)"),
            ));
        }
    }
    let stream = req.stream.unwrap_or(false);
    let include_usage = req.stream_options.as_ref().and_then(|o| o.include_usage);
    if include_usage.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "stream_options needs stream: true",
        ));
    }
    let (events, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let reply = Reply {
        id: format!(
            "{}-{}",
            if kind == Kind::Chat {
                "chatcmpl"
            } else {
                "cmpl"
            },
            s.next_id.fetch_add(1, Ordering::Relaxed)
        ),
        model: s.model.clone(),
        created: unix_now(),
        kind,
        prompt_tokens: prompt.len(),
        include_usage: include_usage.unwrap_or(false),
    };
    let job = Job {
        prompt,
        max_tokens,
        sampler,
        stop,
        events,
        arrived,
    };
    s.worker
        .submit(job)
        .map_err(|r| refused(r, s.max_batch, s.max_queue))?;
    if stream {
        Ok(sse::stream(reply, rx))
    } else {
        sse::collect(reply, rx).await
    }
}

/// The prompt's text and the field it came from.
fn prompt_text(
    tokenizer: &Tokenizer,
    req: &CompletionRequest,
    kind: Kind,
) -> Result<(String, &'static str), ApiError> {
    match kind {
        Kind::Chat => {
            if req.prompt.is_some() {
                return Err(ApiError::invalid(
                    "prompt",
                    "chat completions take messages, not a prompt",
                ));
            }
            let messages = req
                .messages
                .as_ref()
                .ok_or_else(|| ApiError::invalid("messages", "missing field `messages`"))?;
            if messages.is_empty() {
                return Err(ApiError::invalid("messages", "messages must not be empty"));
            }
            let mut chat = Vec::with_capacity(messages.len());
            for (i, m) in messages.iter().enumerate() {
                if !["system", "user", "assistant"].contains(&m.role.as_str()) {
                    return Err(ApiError::invalid(
                        &format!("messages[{i}].role"),
                        format!("unknown role {:?}: system, user or assistant", m.role),
                    ));
                }
                chat.push(ChatMessage::new(&m.role, &m.text(i)?));
            }
            let text = chat_prompt(tokenizer, &chat)
                .map_err(|e| ApiError::invalid("messages", format!("{e:#}")))?;
            Ok((text, "messages"))
        }
        Kind::Text => {
            if req.messages.is_some() {
                return Err(ApiError::invalid(
                    "messages",
                    "completions take a prompt, not messages",
                ));
            }
            match &req.prompt {
                Some(Prompt::Text(t)) => Ok((t.clone(), "prompt")),
                Some(Prompt::Texts(v)) if v.len() == 1 => Ok((v[0].clone(), "prompt")),
                Some(Prompt::Texts(_)) => {
                    Err(ApiError::invalid("prompt", "only one prompt per request"))
                }
                None => Err(ApiError::invalid("prompt", "missing field `prompt`")),
            }
        }
    }
}

/// `messages` formatted with the model's chat template, ending with the
/// prompt of the assistant's reply.
fn chat_prompt(tokenizer: &Tokenizer, messages: &[ChatMessage]) -> radix_text::Result<String> {
    tokenizer.chat_prompt(messages)
}

/// The sampler a request asks for: greedy at temperature 0 (`top_p`, `top_k`
/// and `seed` then change nothing), else a draw.
fn sampler(req: &CompletionRequest) -> Result<Sampler, ApiError> {
    let t = req.temperature.unwrap_or(1.0);
    if !(t.is_finite() && t >= 0.0) {
        return Err(ApiError::invalid(
            "temperature",
            format!("temperature must be 0 or more, got {t}"),
        ));
    }
    if let Some(p) = req.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
        return Err(ApiError::invalid(
            "top_p",
            format!("top_p must be in (0, 1], got {p}"),
        ));
    }
    if req.top_k == Some(0) {
        return Err(ApiError::invalid("top_k", "top_k must be at least 1"));
    }
    if t == 0.0 {
        return Ok(Sampler::greedy());
    }
    let seed = req.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    Sampler::sample(t, req.top_k.map(|k| k as usize), req.top_p, seed)
        .map_err(|e| ApiError::invalid("temperature", e.to_string()))
}

async fn embeddings(State(s): Shared, body: Body) -> Result<Response, ApiError> {
    let req: EmbeddingRequest = parse(body)?;
    let (Some(name), Some(embedder)) = (&s.embed_model, &s.embeddings) else {
        return Err(ApiError::invalid(
            "model",
            "this server has no embedding model (--embed-model none)",
        ));
    };
    if &req.model != name {
        return Err(unknown_model(&req.model, name));
    }
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("unknown encoding_format {other:?}: float or base64"),
            ));
        }
    };
    if req.dimensions.is_some_and(|d| d as usize != embedder.dim) {
        return Err(ApiError::invalid(
            "dimensions",
            format!("the model's embeddings have {} dimensions", embedder.dim),
        ));
    }
    let texts = match req.input {
        Prompt::Text(t) => vec![t],
        Prompt::Texts(v) if v.is_empty() => {
            return Err(ApiError::invalid("input", "input must not be empty"));
        }
        Prompt::Texts(v) => v,
    };
    let rx = embedder
        .submit(texts)
        .map_err(|r| refused(r, 1, s.max_queue))?;
    let (vectors, n_tokens) = rx
        .await
        .map_err(|_| ApiError::internal("the embedding thread stopped"))?
        .map_err(ApiError::internal)?;
    let data: Vec<_> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(axum_json(&json!({
        "object": "list",
        "data": data,
        "model": name,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    })))
}

/// 400 for a model this server does not have.
fn unknown_model(asked: &str, served: &str) -> ApiError {
    ApiError::invalid(
        "model",
        format!("unknown model {asked:?}: this endpoint serves {served:?}"),
    )
}

/// 429 for a full queue, 503 for a stopped worker.
fn refused(r: Refused, slots: usize, queue: usize) -> ApiError {
    match r {
        Refused::Busy => ApiError::busy(format!(
            "the server is busy: {slots} requests running and {queue} waiting; retry later"
        )),
        Refused::Stopped => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping")
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
