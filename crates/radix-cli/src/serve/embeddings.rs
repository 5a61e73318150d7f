//! The embedding worker: one thread owns the embedding model (loaded as
//! `radix embed` loads it) and embeds each request's texts in one call.

use std::path::PathBuf;
use std::sync::mpsc::{self, SyncSender, TrySendError};

use anyhow::{Context, Result, anyhow};
use radix::Platform;
use tokio::sync::oneshot;

use super::worker::Refused;
use crate::embed::open_embedder;

/// The embeddings of a request's texts and how many tokens they held.
pub type Embedded = Result<(Vec<Vec<f32>>, usize), String>;

/// One request: its texts and where the answer goes.
struct Job {
    texts: Vec<String>,
    reply: oneshot::Sender<Embedded>,
}

/// What the server needs of the embedding thread.
pub struct Embeddings {
    queue: SyncSender<Job>,
    /// The width of an embedding.
    pub dim: usize,
}

impl Embeddings {
    /// Loads the model in `dir` on `platform` in a new thread; at most
    /// `max_queue` requests wait.
    pub fn start(platform: Platform, dir: PathBuf, max_queue: usize) -> Result<Embeddings> {
        let (queue, jobs) = mpsc::sync_channel::<Job>(max_queue);
        let (ready_tx, ready) = mpsc::channel();
        std::thread::Builder::new()
            .name("radix-embed".into())
            .spawn(move || {
                let mut embedder = match open_embedder(&platform, &dir) {
                    Ok(e) => e,
                    Err(e) => return drop(ready_tx.send(Err(format!("{e:#}")))),
                };
                let _ = ready_tx.send(Ok(embedder.config().hidden_size as usize));
                // Ends when the server drops its sender.
                for job in jobs {
                    let res = (|| {
                        let texts: Vec<&str> = job.texts.iter().map(String::as_str).collect();
                        let mut n_tokens = 0;
                        for t in &texts {
                            n_tokens += embedder.tokenize(t)?.len();
                        }
                        Ok((embedder.embed(&texts)?, n_tokens))
                    })();
                    let _ = job
                        .reply
                        .send(res.map_err(|e: radix_models::Error| e.to_string()));
                }
            })
            .context("cannot start the embedding thread")?;
        let dim = ready
            .recv()
            .context("the embedding thread ended while loading")?
            .map_err(|e| anyhow!(e))?;
        Ok(Embeddings { queue, dim })
    }

    /// Queues `texts`: the receiver of their embeddings, or why not.
    pub fn submit(&self, texts: Vec<String>) -> Result<oneshot::Receiver<Embedded>, Refused> {
        let (reply, rx) = oneshot::channel();
        self.queue
            .try_send(Job { texts, reply })
            .map_err(|e| match e {
                TrySendError::Full(_) => Refused::Busy,
                TrySendError::Disconnected(_) => Refused::Stopped,
            })?;
        Ok(rx)
    }
}
