//! The embedding worker: one thread owns the embedding model (loaded as
//! `radix embed` loads it) and embeds each request's texts, a batch at a
//! time. A request holds at most [`MAX_INPUTS`] texts and [`MAX_TOKENS`]
//! tokens; a text longer than the model reads is refused unless the request
//! asks for truncation; the work of a client that has hung up stops at the
//! next batch.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use radix::Platform;
use radix_models::bert::{Embedder, EmbedderConfig};
use radix_text::Tokenizer;
use tokio::sync::oneshot;

use super::queue::{Queue, Refused, Waiting};
use crate::embed::open_embedder;

/// The most texts in one request (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;
/// The most tokens in one request, summed over its texts (after truncation).
pub const MAX_TOKENS: usize = 1 << 17;

/// Why a request's texts were not embedded.
pub enum EmbedError {
    /// Text `index` is `tokens` long, more than the model reads, and the
    /// request did not ask for truncation.
    TooLong { index: usize, tokens: usize },
    /// The texts hold more than [`MAX_TOKENS`] tokens.
    TooManyTokens,
    /// The model failed.
    Failed(String),
}

/// The embeddings of a request's texts and how many tokens they held.
pub type Embedded = Result<(Vec<Vec<f32>>, usize), EmbedError>;

/// One request: its texts, whether long ones may be truncated, and where
/// the answer goes.
struct Job {
    texts: Vec<String>,
    truncate: bool,
    reply: oneshot::Sender<Embedded>,
}

impl Waiting for Job {
    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }
}

/// What the server needs of the embedding thread.
pub struct Embeddings {
    queue: Arc<Queue<Job>>,
    thread: JoinHandle<()>,
    /// The width of an embedding.
    pub dim: usize,
    /// The most tokens of one text the model reads.
    pub max_len: usize,
}

impl Embeddings {
    /// Loads the model in `dir` on `platform` in a new thread; at most
    /// `max_queue` requests wait.
    pub fn start(platform: Platform, dir: PathBuf, max_queue: usize) -> Result<Embeddings> {
        let queue = Arc::new(Queue::<Job>::new(max_queue));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let max_len = EmbedderConfig::minilm()
            .length_buckets
            .last()
            .copied()
            .unwrap_or(0);
        let jobs = queue.clone();
        let thread = std::thread::Builder::new()
            .name("radix-embed".into())
            .spawn(move || {
                let opened = open_embedder(&platform, &dir).and_then(|e| {
                    let t = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
                    Ok((e, t))
                });
                let (mut embedder, tokenizer) = match opened {
                    Ok(opened) => opened,
                    Err(e) => return drop(ready_tx.send(Err(format!("{e:#}")))),
                };
                let _ = ready_tx.send(Ok(embedder.config().hidden_size as usize));
                loop {
                    let Some(job) = jobs.pop(Some(Duration::from_secs(3600))) else {
                        continue;
                    };
                    let res = embed(&mut embedder, &tokenizer, max_len, &job);
                    let _ = job.reply.send(res);
                }
            })
            .context("cannot start the embedding thread")?;
        let dim = ready
            .recv()
            .context("the embedding thread ended while loading")?
            .map_err(|e| anyhow!(e))?;
        Ok(Embeddings {
            queue,
            thread,
            dim,
            max_len,
        })
    }

    /// Queues `texts` (truncated to the model's length if `truncate`): the
    /// receiver of their embeddings, or why not.
    pub fn submit(
        &self,
        texts: Vec<String>,
        truncate: bool,
    ) -> Result<oneshot::Receiver<Embedded>, Refused> {
        let (reply, rx) = oneshot::channel();
        self.queue.push(Job {
            texts,
            truncate,
            reply,
        })?;
        Ok(rx)
    }

    /// Whether the thread still runs.
    pub fn is_running(&self) -> bool {
        !self.thread.is_finished()
    }
}

/// Texts embedded per call, and between two looks at whether the client
/// is still there: the model's largest batch.
const CHUNK: usize = 32;

/// Checks `job`'s lengths, then embeds its texts a chunk at a time while
/// its client waits.
fn embed(embedder: &mut Embedder, tokenizer: &Tokenizer, max_len: usize, job: &Job) -> Embedded {
    let failed = |e: &dyn std::fmt::Display| EmbedError::Failed(e.to_string());
    let mut n_tokens = 0;
    for (index, text) in job.texts.iter().enumerate() {
        let tokens = tokenizer.encode(text).map_err(|e| failed(&e))?.len();
        if tokens > max_len && !job.truncate {
            return Err(EmbedError::TooLong { index, tokens });
        }
        n_tokens += tokens.min(max_len);
        if n_tokens > MAX_TOKENS {
            return Err(EmbedError::TooManyTokens);
        }
    }
    let mut vectors = Vec::with_capacity(job.texts.len());
    for chunk in job.texts.chunks(CHUNK) {
        if job.reply.is_closed() {
            return Err(EmbedError::Failed("the client left".into()));
        }
        let texts: Vec<&str> = chunk.iter().map(String::as_str).collect();
        vectors.extend(embedder.embed(&texts).map_err(|e| failed(&e))?);
    }
    Ok((vectors, n_tokens))
}
