//! What a completion request is checked for before it is queued: its
//! model, its prompt (templated and tokenized), its numbers at their
//! types' limits, and what shapes its tokens (the sampler, penalties, bias,
//! a grammar), each refused with a 400 naming the field.

use std::time::{SystemTime, UNIX_EPOCH};

use radix_models::constraint::{Constraint, Grammar};
use radix_models::pick::{Penalties, Picker};
use radix_models::sampling::Sampler;
use radix_text::Tokenizer;
use serde_json::{Value, json};

use super::api::{CompletionRequest, Logprobs, Prompt, Stop};
use super::error::ApiError;
use super::routes::{AppState, unknown_model};
use super::sse::Kind;
use super::tools::{Format, Tools, calls_for_template};

/// The most choices one request may ask for.
pub const MAX_CHOICES: u64 = 16;

/// The most tokens `top_logprobs` (or a completion's `logprobs`) may list.
pub const MAX_TOP_LOGPROBS: u64 = 20;

/// A completion request once checked: what the worker needs and how to
/// answer.
pub struct Checked {
    /// The prompt's tokens.
    pub prompt: Vec<u32>,
    /// The most tokens per choice.
    pub max_tokens: usize,
    /// One per choice.
    pub pickers: Vec<Picker>,
    /// Text that ends a reply.
    pub stop: Vec<String>,
    /// Server-sent events.
    pub stream: bool,
    /// A last chunk with the counts.
    pub include_usage: bool,
    /// How many most likely tokens to list with each token's
    /// log-probability, when they are asked for.
    pub logprobs: Option<usize>,
    /// The tools the model may call, and how its calls are read.
    pub tools: Option<Tools>,
    /// Whether the prompt uses the prompt cache.
    pub cache_prompt: bool,
}

/// Everything a completion request is checked for, in order: its model,
/// its prompt (templated and tokenized), then its numbers, each at its
/// type's limits, then its grammar (compiled here, so that one that does
/// not compile is a 400).
pub fn check(s: &AppState, req: &CompletionRequest, kind: Kind) -> Result<Checked, ApiError> {
    if req.model != s.model {
        return Err(unknown_model(&req.model, &s.model));
    }
    let format = Format::of_template(s.tokenizer.chat_template().map(|t| t.source()));
    let tools = Tools::check(
        req.tools.as_ref(),
        req.tool_choice.as_ref(),
        req.parallel_tool_calls,
        format,
    )?;
    if tools.is_some() && kind == Kind::Text {
        return Err(ApiError::invalid("tools", "tools are for chat completions"));
    }
    let (text, field) = prompt_text(&s.tokenizer, req, kind, tools.as_ref())?;
    let prompt = s
        .tokenizer
        .encode(&text)
        .map_err(|e| ApiError::invalid(field, format!("cannot tokenize the prompt: {e}")))?;
    if prompt.is_empty() {
        return Err(ApiError::invalid(field, "the prompt is empty"));
    }
    // Positions left for the reply (at least one).
    let Some(room) = s.context.checked_sub(prompt.len()).filter(|&r| r > 0) else {
        return Err(ApiError::invalid(
            field,
            format!(
                "the prompt is {} tokens, which leaves no room in the context of {} tokens",
                prompt.len(),
                s.context
            ),
        ));
    };
    // Each limit given is checked; `max_tokens` wins if both are.
    let mut max_tokens = None;
    for (name, asked) in [
        ("max_completion_tokens", req.max_completion_tokens),
        ("max_tokens", req.max_tokens),
    ] {
        match asked {
            None => {}
            Some(0) => {
                return Err(ApiError::invalid(
                    name,
                    format!("{name} must be at least 1"),
                ));
            }
            // Compared without adding: no client number can overflow.
            Some(m) if m > room as u64 => {
                return Err(ApiError::invalid(
                    name,
                    format!(
                        "the prompt ({} tokens) and {name} ({m}) exceed the context of {} tokens",
                        prompt.len(),
                        s.context
                    ),
                ));
            }
            Some(m) => max_tokens = Some(m as usize),
        }
    }
    let max_tokens = max_tokens.unwrap_or(room);
    let stop = match &req.stop {
        None => vec![],
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) if v.len() > 4 => {
            return Err(ApiError::invalid("stop", "at most 4 stop sequences"));
        }
        Some(Stop::Many(v)) => v.clone(),
    };
    let n = match req.n {
        None => 1,
        Some(n) if (1..=MAX_CHOICES).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::invalid(
                "n",
                format!("n must be from 1 to {MAX_CHOICES}, got {n}"),
            ));
        }
    };
    let logprobs = logprobs(req, kind)?;
    let stream = req.stream.unwrap_or(false);
    let include_usage = req.stream_options.as_ref().and_then(|o| o.include_usage);
    if include_usage.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "stream_options needs stream: true",
        ));
    }
    let penalties = penalties(req)?;
    let bias = logit_bias(req, s.tokenizer.vocab_size())?;
    let constraint = constraint(s, req, tools.as_ref())?;
    let seed = req.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let pickers = (0..n)
        .map(|i| {
            Ok(Picker::new(sampler(req, seed.wrapping_add(i as u64))?)
                .with_penalties(penalties, &prompt)
                .with_bias(bias.clone())
                .with_constraint(constraint.clone()))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Checked {
        prompt,
        max_tokens,
        pickers,
        stop,
        stream,
        include_usage: include_usage.unwrap_or(false),
        logprobs,
        tools,
        cache_prompt: req.cache_prompt.unwrap_or(true),
    })
}

/// How many most likely tokens to list with each token's log-probability,
/// if log-probabilities are asked for: chat's `logprobs: true` and
/// `top_logprobs: K`, or a completion's `logprobs: K`.
fn logprobs(req: &CompletionRequest, kind: Kind) -> Result<Option<usize>, ApiError> {
    let count = |name: &str, k: u64| {
        if k > MAX_TOP_LOGPROBS {
            return Err(ApiError::invalid(
                name,
                format!("{name} must be from 0 to {MAX_TOP_LOGPROBS}, got {k}"),
            ));
        }
        Ok(k as usize)
    };
    match kind {
        Kind::Chat => {
            let on = match req.logprobs {
                None | Some(Logprobs::Flag(false)) => false,
                Some(Logprobs::Flag(true)) => true,
                Some(Logprobs::Count(_)) => {
                    return Err(ApiError::invalid(
                        "logprobs",
                        "chat completions take logprobs: true, and top_logprobs for the count",
                    ));
                }
            };
            match (on, req.top_logprobs) {
                (false, Some(_)) => Err(ApiError::invalid(
                    "top_logprobs",
                    "top_logprobs needs logprobs: true",
                )),
                (false, None) => Ok(None),
                (true, k) => count("top_logprobs", k.unwrap_or(0)).map(Some),
            }
        }
        Kind::Text => {
            if req.top_logprobs.is_some() {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    "completions take the count as logprobs: N",
                ));
            }
            match req.logprobs {
                None => Ok(None),
                Some(Logprobs::Count(k)) => count("logprobs", k).map(Some),
                Some(Logprobs::Flag(_)) => Err(ApiError::invalid(
                    "logprobs",
                    "completions take logprobs as a count from 0 to 20",
                )),
            }
        }
    }
}

/// The penalties asked for.
fn penalties(req: &CompletionRequest) -> Result<Penalties, ApiError> {
    let p = Penalties {
        presence: req.presence_penalty.unwrap_or(0.0) as f32,
        frequency: req.frequency_penalty.unwrap_or(0.0) as f32,
        repetition: req.repetition_penalty.unwrap_or(1.0) as f32,
    };
    p.checked().map_err(|e| {
        let msg = e.to_string();
        let msg = msg.strip_prefix("input: ").unwrap_or(&msg).to_string();
        let field = [
            "presence_penalty",
            "frequency_penalty",
            "repetition_penalty",
        ]
        .into_iter()
        .find(|f| msg.starts_with(f))
        .unwrap_or("presence_penalty");
        ApiError::invalid(field, msg)
    })
}

/// `logit_bias` as (token, bias) pairs: each key a token id of the
/// vocabulary, each bias in [-100, 100].
fn logit_bias(req: &CompletionRequest, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(bias) = &req.logit_bias else {
        return Ok(vec![]);
    };
    let mut out: Vec<(u32, f32)> = bias
        .iter()
        .map(|(k, &b)| {
            let param = format!("logit_bias.{k}");
            let id = k
                .parse::<u32>()
                .ok()
                .filter(|&id| (id as usize) < n_vocab)
                .ok_or_else(|| {
                    ApiError::invalid(
                        &param,
                        format!(
                            "{k:?} is not a token id of the vocabulary (0 to {})",
                            n_vocab - 1
                        ),
                    )
                })?;
            if !(-100.0..=100.0).contains(&b) {
                return Err(ApiError::invalid(
                    &param,
                    format!("a bias must be in [-100, 100], got {b}"),
                ));
            }
            Ok((id, b as f32))
        })
        .collect::<Result<_, _>>()?;
    out.sort_by_key(|&(id, _)| id);
    Ok(out)
}

/// The grammar the reply must follow, compiled: from `response_format`,
/// `json_schema` or `grammar` (at most one of them).
fn constraint(
    s: &AppState,
    req: &CompletionRequest,
    tools: Option<&Tools>,
) -> Result<Option<Constraint>, ApiError> {
    let mut asked: Vec<(&str, Grammar)> = vec![];
    if let Some(g) = tools.and_then(Tools::grammar) {
        asked.push(("tool_choice", g));
    }
    if let Some(f) = &req.response_format {
        match f.kind.as_str() {
            "text" => {}
            "json_object" => asked.push(("response_format", Grammar::JsonObject)),
            "json_schema" => {
                let schema = f
                    .json_schema
                    .as_ref()
                    .and_then(|j| j.schema.clone())
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "response_format.json_schema.schema",
                            "response_format of type json_schema needs json_schema.schema",
                        )
                    })?;
                if f.json_schema.as_ref().and_then(|j| j.strict) == Some(false) {
                    tracing::debug!("strict: false is followed strictly anyway");
                }
                asked.push(("response_format", Grammar::JsonSchema(schema)));
            }
            other => {
                return Err(ApiError::invalid(
                    "response_format.type",
                    format!(
                        "unknown response_format type {other:?}: text, json_object or json_schema"
                    ),
                ));
            }
        }
        if f.kind != "json_schema" && f.json_schema.is_some() {
            return Err(ApiError::invalid(
                "response_format.json_schema",
                "json_schema goes with type json_schema",
            ));
        }
    }
    if let Some(schema) = &req.json_schema {
        asked.push(("json_schema", Grammar::JsonSchema(schema.clone())));
    }
    if let Some(g) = &req.grammar {
        asked.push(("grammar", Grammar::Grammar(g.clone())));
    }
    match &asked[..] {
        [] => Ok(None),
        [(field, grammar)] => s.vocab.constraint(grammar).map(Some).map_err(|e| {
            let msg = e.to_string();
            let msg = msg.strip_prefix("input: ").unwrap_or(&msg);
            ApiError::invalid(field, format!("{field}: {msg}"))
        }),
        [(first, _), (second, _), ..] => Err(ApiError::invalid(
            second,
            format!(
                "give one of response_format, json_schema and grammar, not {first} and {second}"
            ),
        )),
    }
}

/// The prompt's text and the field it came from.
fn prompt_text(
    tokenizer: &Tokenizer,
    req: &CompletionRequest,
    kind: Kind,
    tools: Option<&Tools>,
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
            let text = chat_prompt(tokenizer, messages, tools)?;
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

/// `messages` formatted with the model's chat template (with `tools`, if
/// any), ending with the prompt of the assistant's reply; 400 naming the
/// message at fault.
pub fn chat_prompt(
    tokenizer: &Tokenizer,
    messages: &[super::api::Message],
    tools: Option<&Tools>,
) -> Result<String, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    let mut chat = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if !["system", "user", "assistant", "tool"].contains(&m.role.as_str()) {
            return Err(ApiError::invalid(
                &format!("messages[{i}].role"),
                format!("unknown role {:?}: system, user, assistant or tool", m.role),
            ));
        }
        let calls = m.tool_calls.as_deref().filter(|c| !c.is_empty());
        if m.content.is_none() && (m.role != "assistant" || calls.is_none()) {
            return Err(ApiError::invalid(
                &format!("messages[{i}].content"),
                "missing field `content` (only an assistant's tool calls go without)",
            ));
        }
        if calls.is_some() && m.role != "assistant" {
            return Err(ApiError::invalid(
                &format!("messages[{i}].tool_calls"),
                "only an assistant's message has tool_calls",
            ));
        }
        let mut msg = json!({"role": m.role, "content": m.text(i)?});
        if let Some(calls) = calls {
            msg["tool_calls"] = Value::Array(calls_for_template(calls));
        }
        if let Some(id) = &m.tool_call_id {
            msg["tool_call_id"] = json!(id);
        }
        chat.push(msg);
    }
    tokenizer
        .chat_prompt_json(&chat, tools.map(|t| &t.list))
        .map_err(|e| ApiError::invalid("messages", format!("{e:#}")))
}

/// The sampler a request asks for, drawing with `seed`: greedy at
/// temperature 0 (`top_p`, `top_k`, `min_p` and `seed` then change
/// nothing), else a draw.
fn sampler(req: &CompletionRequest, seed: u64) -> Result<Sampler, ApiError> {
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
    if let Some(p) = req.min_p.filter(|p| !(0.0..=1.0).contains(p)) {
        return Err(ApiError::invalid(
            "min_p",
            format!("min_p must be in [0, 1], got {p}"),
        ));
    }
    if t == 0.0 {
        return Ok(Sampler::greedy());
    }
    // A top_k past the vocabulary keeps every token, as does usize::MAX.
    let top_k = req.top_k.map(|k| usize::try_from(k).unwrap_or(usize::MAX));
    Sampler::sample(t, top_k, req.top_p, seed)
        .and_then(|s| s.with_min_p(req.min_p))
        .map_err(|e| ApiError::invalid("temperature", e.to_string()))
}
