//! `radix serve`: an OpenAI-compatible HTTP server. A language model
//! answers `/v1/chat/completions` and `/v1/completions` (whole or streamed
//! as server-sent events), an embedding model `/v1/embeddings`; `/v1/models`,
//! `/health` and `/metrics` (Prometheus) tell what runs.
//!
//! Each model is owned by one thread ([`worker`], [`embeddings`]) fed by a
//! bounded queue ([`queue`]); the HTTP side (tokio + axum over hyper's
//! HTTP/1, [`conn`]) checks requests, queues them and turns what comes back
//! into answers. SIGTERM or Ctrl-C stops accepting connections, lets running
//! requests finish up to `--shutdown-timeout`, then cuts the rest and exits 0.
//!
//! *Invariant:* no client can wedge the server: every number a client sends
//! is checked at its type's limits, every request has a deadline
//! (`--request-timeout`), every socket a read timeout, the connections a
//! cap, and `/health` answers 503 when the generation thread is stuck or
//! gone.

mod api;
mod args;
mod check;
mod conn;
mod embeddings;
mod error;
mod fault;
mod heap;
mod job;
mod metrics;
mod queue;
mod routes;
mod sse;
mod stop;
mod tokens;
mod tools;
mod worker;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
pub use args::ServeArgs;
use conn::{ConnConfig, InFlight};

use radix_models::constraint::Vocabulary;

use crate::Cli;
use crate::embed::model_dir;
use crate::generate::{DtypeArg, Model, matrix_format, open_platform, spinner};
use embeddings::Embeddings;
use metrics::Metrics;
use routes::AppState;
use worker::{Worker, WorkerConfig};

/// Runs `radix serve` until SIGTERM or Ctrl-C.
pub fn run(cli: &Cli, args: &ServeArgs) -> Result<()> {
    args.check()?;
    heap::configure();
    let api_key = args.api_key()?;
    if api_key.is_none() && !is_loopback(&args.host) {
        eprintln!(
            "radix serve: warning: listening on {} without an API key: anyone who can reach \
             it can use the model (--api-key-file or RADIX_API_KEY sets one)",
            args.host
        );
    }
    let conns = ConnConfig {
        read_timeout: args.read_timeout(),
        max_connections: max_connections(args.max_connections, conn::raise_open_files()),
    };
    let model = Model::open(&args.model)?;
    let cache_type = args.cache_type.cache_type();
    let per_position = model.config.cache_bytes_per_position(cache_type);
    let context = args.context(model.context, per_position)?;
    ensure!(
        context <= model.context,
        "--context {context} is longer than the model's context of {} tokens",
        model.context
    );
    let embed_dir = match args.embed_model.as_str() {
        "none" => None,
        name => Some(model_dir(name)?),
    };
    let platform = open_platform(cli)?;
    let metrics = Arc::new(Metrics::default());
    let tokenizer = model.tokenizer.clone();
    let vocab = Vocabulary::new(&tokenizer, model.config.vocab as usize, &model.stops)?;
    let bar = spinner("loading the models and compiling (or loading from the cache)".into());
    let cfg = WorkerConfig {
        context,
        max_batch: args.max_batch,
        max_queue: args.max_queue,
        matrices: matrix_format(DtypeArg::Stored, args.exact)?,
        cache_type,
        prompt_cache: (args.cache_ram as usize).saturating_mul(1 << 20),
        prefill_chunk: args.prefill_chunk,
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
        vocab,
        context,
        cache_type,
        max_batch: args.max_batch,
        max_queue: args.max_queue,
        worker,
        embeddings,
        metrics,
        api_key,
        next_id: AtomicU64::new(0),
        request_timeout: args.request_timeout(),
        read_timeout: args.read_timeout(),
        health_timeout: args.health_timeout(),
        in_flight: InFlight::default(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let res = runtime.block_on(serve(state.clone(), args, conns));
    state.worker.stop(Duration::from_secs(5));
    // Connections still open past the deadline are dropped.
    runtime.shutdown_timeout(Duration::from_secs(1));
    res
}

/// Serves until a stop signal, then until running requests end or the
/// deadline passes.
async fn serve(state: Arc<AppState>, args: &ServeArgs, conns: ConnConfig) -> Result<()> {
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let addr = listener.local_addr()?;
    outln!("radix serve: listening on http://{addr}")?;
    let (stopping, stop) = tokio::sync::watch::channel(false);
    let accept = tokio::spawn(conn::accept(
        listener,
        routes::router(state.clone()),
        conns,
        stop,
    ));
    stop_signal().await;
    eprintln!("radix serve: stopping (no new connections)");
    let _ = stopping.send(true);
    // The listener closes as the accept loop ends.
    let _ = accept.await;
    let grace = args.shutdown_timeout();
    tokio::select! {
        () = state.in_flight.idle() => {}
        () = tokio::time::sleep(grace) => {
            eprintln!("radix serve: requests still running after {grace:?} are cut");
        }
    }
    Ok(())
}

/// `wanted` connections, fewer if the open-file limit leaves less room
/// after the descriptors the model files, the plugin and the threads take.
fn max_connections(wanted: usize, open_files: Option<u64>) -> usize {
    const RESERVED: u64 = 64;
    match open_files {
        Some(limit) => wanted.min(limit.saturating_sub(RESERVED).max(1) as usize),
        None => wanted,
    }
}

/// Whether `host` names only this machine.
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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
