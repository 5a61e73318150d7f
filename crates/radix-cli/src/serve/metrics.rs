//! The server's counters, written out in Prometheus' text format by
//! `GET /metrics`: requests by route and status, tokens in and out (and
//! those the prompt cache held), time to
//! the first token and between tokens, queue depth and busy slots, and the
//! batched decode steps with the sequences they ran (their ratio is the mean
//! batch).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Every counter of the server; shared by the routes and the worker.
#[derive(Default)]
pub struct Metrics {
    /// Answers by route and status code.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    prompt_tokens: AtomicU64,
    /// Prompt tokens the prompt cache held (not run again).
    prompt_tokens_cached: AtomicU64,
    generated_tokens: AtomicU64,
    /// Sequences ended because their client went away.
    cancelled: AtomicU64,
    /// Batched decode steps run.
    decode_steps: AtomicU64,
    /// Sequences those steps advanced, summed over the steps.
    decode_rows: AtomicU64,
    /// Requests waiting for a slot.
    pub queue_depth: AtomicI64,
    /// Sequences generating.
    pub active_slots: AtomicI64,
    first_token: Histogram,
    per_token: Histogram,
}

impl Metrics {
    /// Counts an answer of `status` on `route`.
    pub fn request(&self, route: &str, status: u16) {
        let mut map = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry((route.to_string(), status)).or_default() += 1;
    }

    /// Counts a prompt of `n` tokens.
    pub fn prompt(&self, n: usize) {
        self.prompt_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts `n` prompt tokens found in the prompt cache.
    pub fn prompt_cached(&self, n: usize) {
        self.prompt_tokens_cached
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts a generated token, `after` the request arrived (its first) or
    /// the sequence's token before.
    pub fn token(&self, first: bool, after: Duration) {
        self.generated_tokens.fetch_add(1, Ordering::Relaxed);
        if first {
            self.first_token.observe(after.as_secs_f64());
        } else {
            self.per_token.observe(after.as_secs_f64());
        }
    }

    /// Counts a decode step that advanced `rows` sequences.
    pub fn decode_step(&self, rows: usize) {
        self.decode_steps.fetch_add(1, Ordering::Relaxed);
        self.decode_rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// Counts a sequence cut short by its client leaving.
    pub fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let w = &mut out;
        let _ = writeln!(
            w,
            "# HELP radix_requests_total HTTP answers by route and status."
        );
        let _ = writeln!(w, "# TYPE radix_requests_total counter");
        let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        for ((route, status), n) in requests.iter() {
            let _ = writeln!(
                w,
                "radix_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        drop(requests);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let gauge = |a: &AtomicI64| a.load(Ordering::Relaxed).max(0);
        for (name, kind, help, value) in [
            (
                "radix_prompt_tokens_total",
                "counter",
                "Prompt tokens read.",
                load(&self.prompt_tokens),
            ),
            (
                "radix_prompt_tokens_cached_total",
                "counter",
                "Prompt tokens found in the prompt cache (not run again).",
                load(&self.prompt_tokens_cached),
            ),
            (
                "radix_generated_tokens_total",
                "counter",
                "Tokens generated.",
                load(&self.generated_tokens),
            ),
            (
                "radix_cancelled_total",
                "counter",
                "Sequences cut short because the client left.",
                load(&self.cancelled),
            ),
            (
                "radix_decode_steps_total",
                "counter",
                "Batched decode steps run.",
                load(&self.decode_steps),
            ),
            (
                "radix_decode_rows_total",
                "counter",
                "Sequences advanced by the decode steps (summed over steps).",
                load(&self.decode_rows),
            ),
            (
                "radix_queue_depth",
                "gauge",
                "Requests waiting for a slot.",
                gauge(&self.queue_depth) as u64,
            ),
            (
                "radix_active_slots",
                "gauge",
                "Sequences generating.",
                gauge(&self.active_slots) as u64,
            ),
        ] {
            let _ = writeln!(
                w,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        self.first_token.render(
            w,
            "radix_time_to_first_token_seconds",
            "From the request's arrival to its first token.",
        );
        self.per_token.render(
            w,
            "radix_time_per_output_token_seconds",
            "Between a sequence's successive tokens.",
        );
        out
    }
}

/// Upper bounds of the latency buckets, in seconds.
const BOUNDS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A latency histogram with [`BOUNDS`].
#[derive(Default)]
struct Histogram {
    inner: Mutex<HistogramCounts>,
}

#[derive(Default)]
struct HistogramCounts {
    /// Per bound, the observations at most that large (not cumulative).
    counts: [u64; BOUNDS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&self, v: f64) {
        let mut h = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = BOUNDS.iter().position(|&b| v <= b) {
            h.counts[i] += 1;
        }
        h.count += 1;
        h.sum += v;
    }

    fn render(&self, w: &mut String, name: &str, help: &str) {
        let h = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(w, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, n) in BOUNDS.iter().zip(h.counts) {
            cumulative += n;
            let _ = writeln!(w, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(w, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(w, "{name}_sum {}\n{name}_count {}", h.sum, h.count);
    }
}
