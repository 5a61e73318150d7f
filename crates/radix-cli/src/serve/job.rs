//! What the worker takes and gives back: a request's job, and the events of
//! its reply on the request's channel.

use std::time::Instant;

use radix_models::pick::Picker;
use tokio::sync::mpsc::UnboundedSender;

/// One request for the worker.
pub struct Job {
    /// The prompt's tokens.
    pub prompt: Vec<u32>,
    /// The most tokens to generate (the prompt and these fit the context).
    pub max_tokens: usize,
    /// How tokens are picked.
    pub picker: Picker,
    /// With each token, its log-probability and those of this many most
    /// likely tokens, if asked.
    pub logprobs: Option<usize>,
    /// Text that ends the reply.
    pub stop: Vec<String>,
    /// Whether the prompt may start from the prompt cache and is kept
    /// there.
    pub cache_prompt: bool,
    /// Where the reply goes; closed when the client is gone.
    pub events: Events,
    /// When the request arrived.
    pub arrived: Instant,
}

/// Where one choice's events go: the request's channel, each event tagged
/// with the choice.
#[derive(Clone)]
pub struct Events {
    /// The choice's index.
    pub choice: usize,
    /// The request's channel.
    pub tx: UnboundedSender<(usize, Event)>,
}

impl Events {
    /// Sends `event`: `Err` when the client is gone.
    pub fn send(&self, event: Event) -> Result<(), ()> {
        self.tx.send((self.choice, event)).map_err(drop)
    }

    /// Whether the client is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The log-probability of one generated token, and of the most likely
/// tokens at its place.
#[derive(Debug, Clone)]
pub struct TokenLogprob {
    /// The token.
    pub id: u32,
    /// Its log-probability under the model's logits.
    pub logprob: f32,
    /// The most likely tokens and theirs, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// What the worker sends back for a job.
#[derive(Debug)]
pub enum Event {
    /// More text of the reply, and the log-probabilities of the tokens
    /// picked since the last (if asked).
    Text(String, Vec<TokenLogprob>),
    /// The end of the reply.
    Done {
        /// Why it ended.
        finish: Finish,
        /// How many tokens were generated.
        completion_tokens: usize,
        /// How many prompt tokens came from the prompt cache.
        cached_tokens: usize,
    },
    /// The generation failed.
    Failed(String),
}

/// Why a reply ended, as OpenAI's `finish_reason` says it.
#[derive(Debug, Clone, Copy)]
pub enum Finish {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens`.
    Length,
}

impl Finish {
    /// `stop` or `length`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}
