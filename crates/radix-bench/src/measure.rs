//! Timing loops and the JSON report every subcommand prints.

use std::time::Instant;

use serde_json::{Map, Value, json};

/// One subcommand's output: named sample lists with their unit, facts about
/// the run, and (added by [`Report::finish`]) the peak RSS.
pub struct Report {
    bench: &'static str,
    samples: Map<String, Value>,
    meta: Map<String, Value>,
}

impl Report {
    pub fn new(bench: &'static str) -> Report {
        Report {
            bench,
            samples: Map::new(),
            meta: Map::new(),
        }
    }

    /// Records the samples of one figure, in `unit`.
    pub fn samples(&mut self, name: &str, unit: &str, values: &[f64]) {
        self.samples
            .insert(name.into(), json!({ "unit": unit, "values": values }));
    }

    /// Records a fact about the run.
    pub fn meta(&mut self, name: &str, value: Value) {
        self.meta.insert(name.into(), value);
    }

    /// The JSON object, with the process's peak RSS so far.
    pub fn finish(self) -> Value {
        json!({
            "system": "radix",
            "bench": self.bench,
            "samples": self.samples,
            "meta": self.meta,
            "peak_rss_mb": peak_rss_mb(),
            "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        })
    }
}

/// The mean seconds per call of `n` calls of `f`.
pub fn time_per_call<E>(n: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    let t = Instant::now();
    for _ in 0..n {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() / n as f64)
}

/// `VmHWM` of `/proc/self/status` in MiB (Linux), or null elsewhere.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
