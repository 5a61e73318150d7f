//! Connections: the accept loop, with at most `--max-connections` open at
//! once (the rest wait in the listen backlog), each served by hyper's
//! HTTP/1 with a timer, so that a client sending its headers too slowly,
//! or an idle keep-alive connection, is closed after `--read-timeout`.
//! [`InFlight`] counts the requests being answered: after a stop signal the
//! server waits for those, never for a connection that has sent no
//! complete request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};

/// How connections are served.
pub struct ConnConfig {
    /// The longest a client may take to send a request's headers, and
    /// the longest a connection may stay idle between requests.
    pub read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

/// Accepts and serves connections until `stop` turns true; then asks every
/// open connection to close after its current answer and returns.
pub async fn accept(
    listener: TcpListener,
    router: Router,
    cfg: ConnConfig,
    stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(cfg.max_connections));
    let mut stopping = stop.clone();
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            () = stopped(&mut stopping) => return,
        };
        let socket = tokio::select! {
            res = listener.accept() => match res {
                Ok((socket, _)) => socket,
                // Out of descriptors (or another passing error): the
                // connection waits in the backlog until one is freed.
                Err(e) => {
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut stopping) => return,
        };
        let service = TowerToHyperService::new(router.clone());
        let mut stop = stop.clone();
        let read_timeout = cfg.read_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(read_timeout)
                .serve_connection(TokioIo::new(socket), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

/// Returns once `stop` is true (never, if its sender is gone first).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Raises the soft limit of open files to the hard limit: the soft limit
/// then, if it can be read.
pub fn raise_open_files() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid `rlimit` for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid `rlimit`; a refusal leaves the limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    Some(lim.rlim_cur)
}

/// The requests being answered.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Counter>);

#[derive(Default)]
struct Counter {
    n: AtomicUsize,
    idle: Notify,
}

/// One request being answered, until dropped.
pub struct InFlightGuard(Arc<Counter>);

impl InFlight {
    /// Counts one more request until the guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.0.n.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.0.clone())
    }

    /// Returns once no request is being answered.
    pub async fn idle(&self) {
        loop {
            let notified = self.0.idle.notified();
            if self.0.n.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
