//! `radix serve`: an OpenAI-compatible HTTP server. A language model
//! answers `/v1/chat/completions` and `/v1/completions` (whole or streamed
//! as server-sent events), an embedding model `/v1/embeddings`; `/v1/models`,
//! `/health` and `/metrics` (Prometheus) tell what runs.
//!
//! Each model is owned by one thread ([`worker`], [`embeddings`]) fed by a
//! bounded queue; the HTTP side (tokio + axum) checks requests, queues them
//! and turns what comes back into answers. SIGTERM or Ctrl-C stops accepting
//! connections, lets running requests finish up to `--shutdown-timeout`,
//! then cuts the rest and exits 0.

mod api;
mod args;
mod embeddings;
mod error;
mod metrics;
mod routes;
mod sse;
mod stop;
mod worker;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
pub use args::ServeArgs;

use crate::Cli;
use crate::embed::model_dir;
use crate::generate::{Model, open_platform, spinner};
use embeddings::Embeddings;
use metrics::Metrics;
use routes::AppState;
use worker::{Worker, WorkerConfig};

/// Runs `radix serve` until SIGTERM or Ctrl-C.
pub fn run(cli: &Cli, args: &ServeArgs) -> Result<()> {
    args.check()?;
    let model = Model::open(&args.model)?;
    ensure!(
        args.context <= model.context,
        "--context {} is longer than the model's context of {} tokens",
        args.context,
        model.context
    );
    let embed_dir = match args.embed_model.as_str() {
        "none" => None,
        name => Some(model_dir(name)?),
    };
    let platform = open_platform(cli)?;
    let metrics = Arc::new(Metrics::default());
    let tokenizer = model.tokenizer.clone();
    let bar = spinner("loading the models and compiling (or loading from the cache)".into());
    let cfg = WorkerConfig {
        context: args.context,
        max_batch: args.max_batch,
        max_queue: args.max_queue,
    };
    let worker = Worker::start(platform.clone(), model, cfg, metrics.clone())?;
    let embeddings = embed_dir
        .map(|dir| Embeddings::start(platform, dir, args.max_queue))
        .transpose()?;
    bar.finish_and_clear();
    let state = Arc::new(AppState {
        model: args.model.clone(),
        embed_model: embeddings.as_ref().map(|_| args.embed_model.clone()),
        tokenizer,
        context: args.context,
        max_batch: args.max_batch,
        max_queue: args.max_queue,
        worker,
        embeddings,
        metrics,
        api_key: args.api_key.clone(),
        next_id: AtomicU64::new(0),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let res = runtime.block_on(serve(state.clone(), args));
    state.worker.stop();
    // Connections still open past the deadline are dropped.
    runtime.shutdown_timeout(Duration::from_secs(1));
    res
}

/// Serves until a stop signal, then until running requests end or the
/// deadline passes.
async fn serve(state: Arc<AppState>, args: &ServeArgs) -> Result<()> {
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let addr = listener.local_addr()?;
    outln!("radix serve: listening on http://{addr}")?;
    let (stopping, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop_signal().await;
        eprintln!("radix serve: stopping (no new connections)");
        let _ = stopping.send(true);
        // Kept alive: a dropped sender would end the waits below at once.
        std::future::pending::<()>().await;
    });
    let mut on_stop = stop.clone();
    let server = axum::serve(listener, routes::router(state)).with_graceful_shutdown(async move {
        let _ = on_stop.wait_for(|s| *s).await;
    });
    let mut deadline = stop;
    let grace = args.shutdown_timeout();
    tokio::select! {
        res = async { server.await } => res.context("the server failed")?,
        () = async {
            let _ = deadline.wait_for(|s| *s).await;
            tokio::time::sleep(grace).await;
        } => eprintln!("radix serve: requests still running after {grace:?} are cut"),
    }
    Ok(())
}

/// SIGTERM or Ctrl-C (never, if neither can be listened for).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
