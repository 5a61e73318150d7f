//! The routes: what each endpoint checks, and the job or answer it makes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body as AxumBody, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use futures_util::StreamExt as _;
use radix::nn::CacheType;
use radix_models::constraint::Vocabulary;
use radix_text::Tokenizer;
use serde::Serialize;
use serde_json::json;
use subtle::ConstantTimeEq as _;

use super::api::{CompletionRequest, EmbeddingRequest, Prompt, parse};
use super::check;
use super::conn::InFlight;
use super::embeddings::{self as embed, EmbedError, Embeddings};
use super::error::{ApiError, axum_json};
use super::metrics::Metrics;
use super::sse::{self, Kind, Reply, StreamEnd};
use super::worker::{Event, Events, Health, Job, Refused, Worker};
use super::{tokens, tools};

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
    /// Its vocabulary as grammars and log-probabilities read it.
    pub vocab: Vocabulary,
    /// Positions per sequence.
    pub context: usize,
    /// How the key/value caches store keys and values.
    pub cache_type: CacheType,
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
    /// The longest a request may take.
    pub request_timeout: Duration,
    /// The longest a client may take to send a body.
    pub read_timeout: Duration,
    /// How long the generation thread may go without finishing a turn
    /// before `/health` says so.
    pub health_timeout: Duration,
    /// The requests being answered.
    pub in_flight: InFlight,
}

/// The state as a route takes it.
pub type Shared = State<Arc<AppState>>;
/// A body as a route takes it.
pub type Body = Result<Bytes, BytesRejection>;

/// Every route, with the API key check on `/v1/...`, the body limit and the
/// request counter.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokens::tokenize))
        .route("/detokenize", post(tokens::detokenize))
        .route("/apply-template", post(tokens::apply_template))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

/// The routes counted by name; others count as `other`.
const ROUTES: [&str; 9] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/models",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/health",
    "/metrics",
];

/// The route `path` is counted as.
pub fn route_name(path: &str) -> &'static str {
    ROUTES
        .iter()
        .find(|r| **r == path)
        .copied()
        .unwrap_or("other")
}

/// Counts the answer by route and status (a stream counts itself when it
/// ends: [`StreamEnd`]) and the request as in flight while it runs.
async fn count(State(s): Shared, req: Request, next: Next) -> Response {
    let _in_flight = s.in_flight.enter();
    let route = route_name(req.uri().path());
    let res = next.run(req).await;
    if res.extensions().get::<StreamEnd>().is_none() {
        s.metrics.request(route, res.status().as_u16());
    }
    res
}

/// Reads the body before any route sees it: 413 at once for a declared
/// length over [`BODY_LIMIT`] (or a body that grows past it), 408 for a
/// body that does not arrive within `--read-timeout`.
async fn read_body(State(s): Shared, req: Request, next: Next) -> Response {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {BODY_LIMIT} bytes"),
        )
        .into_response()
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    let mut chunks = body.into_data_stream();
    let read = async {
        let mut bytes = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the body: {e}"),
                )
                .into_response()
            })?;
            if bytes.len() + chunk.len() > BODY_LIMIT {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    let bytes = match tokio::time::timeout(s.read_timeout, read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(res)) => return res,
        Err(_) => {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within --read-timeout ({:?})",
                    s.read_timeout
                ),
            )
            .into_response();
        }
    };
    next.run(Request::from_parts(parts, AxumBody::from(bytes)))
        .await
}

async fn authorize(State(s): Shared, req: Request, next: Next) -> Response {
    if let Some(key) = &s.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| bearer_token(v.as_bytes()));
        let matches = given.is_some_and(|g| bool::from(g.ct_eq(key.as_bytes())));
        if !matches {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// The token of an `Authorization: Bearer <token>` value (the scheme in
/// any case, as RFC 9110 says).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer ")).then(|| token.trim_ascii())
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", req.method(), req.uri().path()),
    )
}

/// 200 and the server's settings while the generation thread (and the
/// embedding thread, if any) can take requests, else 503 saying why.
async fn health(State(s): Shared) -> Response {
    let problem = match s.worker.health(s.health_timeout) {
        Health::Ok => None,
        Health::Stuck(age) => Some(format!(
            "the generation thread has not finished a step for {:.1} s",
            age.as_secs_f64()
        )),
        Health::Gone => Some("the generation thread has stopped".to_string()),
    };
    let problem = problem.or_else(|| {
        s.embeddings
            .as_ref()
            .filter(|e| !e.is_running())
            .map(|_| "the embedding thread has stopped".to_string())
    });
    if let Some(problem) = problem {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum_json(&json!({"status": "unavailable", "reason": problem})),
        )
            .into_response();
    }
    axum_json(&json!({
        "status": "ok",
        "model": s.model,
        "embed_model": s.embed_model,
        "context": s.context,
        "cache_type": s.cache_type.name(),
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
    complete(s, parse(body)?, Kind::Chat).await
}

async fn completions(State(s): Shared, body: Body) -> Result<Response, ApiError> {
    complete(s, parse(body)?, Kind::Text).await
}

/// Checks a completion request (templating and tokenizing on a blocking
/// thread, not the server's), queues it and answers.
async fn complete(
    s: Arc<AppState>,
    req: CompletionRequest,
    kind: Kind,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let deadline = tokio::time::Instant::from_std(arrived) + s.request_timeout;
    let checked = {
        let s = s.clone();
        tokio::task::spawn_blocking(move || check::check(&s, &req, kind))
            .await
            .map_err(|e| ApiError::internal(format!("the request's check failed: {e}")))??
    };
    let (events, rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Event)>();
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
        prompt_tokens: checked.prompt.len(),
        include_usage: checked.include_usage,
        choices: checked.pickers.len(),
        logprobs: checked.logprobs.is_some(),
        vocab: s.vocab.clone(),
        tools: checked.tools.filter(|t| t.choice != tools::Choice::None),
    };
    // One sequence per choice; if one cannot be queued the request fails
    // and those queued leave as their client is gone.
    for (choice, picker) in checked.pickers.into_iter().enumerate() {
        let job = Job {
            prompt: checked.prompt.clone(),
            max_tokens: checked.max_tokens,
            picker,
            logprobs: checked.logprobs,
            stop: checked.stop.clone(),
            cache_prompt: checked.cache_prompt,
            events: Events {
                choice,
                tx: events.clone(),
            },
            arrived,
        };
        s.worker
            .submit(job)
            .map_err(|r| refused(r, s.max_batch, s.max_queue))?;
    }
    drop(events);
    if checked.stream {
        let end = StreamEnd::new(
            s.metrics.clone(),
            kind.route(),
            s.in_flight.enter(),
            s.request_timeout,
        );
        Ok(sse::stream(reply, rx, deadline, end))
    } else {
        match tokio::time::timeout_at(deadline, sse::collect(reply, rx)).await {
            Ok(res) => res,
            Err(_) => Err(timed_out(s.request_timeout)),
        }
    }
}

/// 504 for a request past `--request-timeout`.
pub fn timed_out(limit: Duration) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        format!("the request took longer than --request-timeout ({limit:?})"),
    )
}

async fn embeddings(State(s): Shared, body: Body) -> Result<Response, ApiError> {
    let deadline = tokio::time::Instant::now() + s.request_timeout;
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
    if req.dimensions.is_some_and(|d| d != embedder.dim as u64) {
        return Err(ApiError::invalid(
            "dimensions",
            format!("the model's embeddings have {} dimensions", embedder.dim),
        ));
    }
    let (texts, listed) = match req.input {
        Prompt::Text(t) => (vec![t], false),
        Prompt::Texts(v) if v.is_empty() => {
            return Err(ApiError::invalid("input", "input must not be empty"));
        }
        Prompt::Texts(v) if v.len() > embed::MAX_INPUTS => {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "{} inputs: at most {} per request",
                    v.len(),
                    embed::MAX_INPUTS
                ),
            ));
        }
        Prompt::Texts(v) => (v, true),
    };
    let rx = embedder
        .submit(texts, req.truncate.unwrap_or(false))
        .map_err(|r| refused(r, 1, s.max_queue))?;
    let answer = tokio::time::timeout_at(deadline, rx)
        .await
        .map_err(|_| timed_out(s.request_timeout))?
        .map_err(|_| ApiError::internal("the embedding thread stopped"))?;
    let (vectors, n_tokens) = answer.map_err(|e| match e {
        EmbedError::TooLong { index, tokens } => ApiError::invalid(
            &if listed {
                format!("input[{index}]")
            } else {
                "input".to_string()
            },
            format!(
                "the text is {tokens} tokens, more than the {} the model reads: \
                 shorten it, or send \"truncate\": true to embed its first {0}",
                embedder.max_len
            ),
        ),
        EmbedError::TooManyTokens => ApiError::invalid(
            "input",
            format!(
                "the inputs hold more than {} tokens: send fewer per request",
                embed::MAX_TOKENS
            ),
        ),
        EmbedError::Failed(e) => ApiError::internal(e),
    })?;
    let data: Vec<EmbeddingItem> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| EmbeddingItem {
            object: "embedding",
            index,
            embedding: if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                EmbeddingValue::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                EmbeddingValue::Floats(v)
            },
        })
        .collect();
    let list = EmbeddingList {
        object: "list",
        data,
        model: name,
        usage: Usage {
            prompt_tokens: n_tokens,
            total_tokens: n_tokens,
        },
    };
    let body = serde_json::to_vec(&list)
        .map_err(|e| ApiError::internal(format!("cannot write the answer: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The answer of `/v1/embeddings`, written straight from the vectors.
#[derive(Serialize)]
struct EmbeddingList<'a> {
    object: &'static str,
    data: Vec<EmbeddingItem<'a>>,
    model: &'a str,
    usage: Usage,
}

#[derive(Serialize)]
struct EmbeddingItem<'a> {
    object: &'static str,
    index: usize,
    embedding: EmbeddingValue<'a>,
}

/// Floats, or their little-endian bytes in base64.
#[derive(Serialize)]
#[serde(untagged)]
enum EmbeddingValue<'a> {
    Floats(&'a [f32]),
    Base64(String),
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// 400 for a model this server does not have.
pub fn unknown_model(asked: &str, served: &str) -> ApiError {
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
        Refused::Stopped => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the model's thread has stopped: the server is stopping, or /health says why",
        ),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
