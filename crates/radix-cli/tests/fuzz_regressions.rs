//! The fuzz targets (`fuzz/src/targets.rs`, built here without libFuzzer)
//! run on every input a fuzzer found a crash with (`fuzz/regressions/TARGET/`,
//! kept after the fix) and on a few of the real files their corpora are
//! seeded with: a fix stays fixed (a hang too: each input has a deadline),
//! and the targets keep compiling with the code they call.

#[allow(dead_code, reason = "the targets read; the writers serve the CLI")]
#[path = "../src/npy.rs"]
mod npy;
#[allow(dead_code, reason = "the targets use the signature reader only")]
#[path = "../src/signature.rs"]
mod signature;
#[path = "../../../fuzz/src/targets.rs"]
mod targets;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The most one input may take. Each takes milliseconds (the slowest, the
/// tiny models' tokenizers, under a second in a debug build on a loaded
/// 2-core machine); the hang the `npy` regression was found with (a header
/// of nested brackets) took minutes.
const DEADLINE: Duration = Duration::from_secs(30);

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// The regression inputs, `fuzz/regressions/TARGET/FILE`, sorted: every
/// folder there must be named after a target (else its files would never
/// run), and the folder itself must exist.
fn regressions() -> Vec<(&'static str, PathBuf)> {
    let root = repo("fuzz/regressions");
    let entries = std::fs::read_dir(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    let mut out = Vec::new();
    for entry in entries {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let target = targets::TARGETS
            .iter()
            .find(|&&t| t == name)
            .unwrap_or_else(|| panic!("{}: not a fuzz target's folder", dir.display()));
        for file in std::fs::read_dir(&dir).unwrap() {
            out.push((*target, file.unwrap().path()));
        }
    }
    out.sort();
    out
}

/// Runs `target` on `bytes` on a thread of its own, failing the test when it
/// takes more than [`DEADLINE`] (the thread is left behind; the test
/// process ends with the test run).
fn run_within_deadline(target: &'static str, file: &Path, bytes: Vec<u8>) {
    let (send, recv) = mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        let known = targets::run(target, &bytes);
        let _ = send.send(known);
    });
    match recv.recv_timeout(DEADLINE) {
        Ok(known) => assert!(known, "no target {target}"),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "{target} on {} still runs after {DEADLINE:?}: a hang",
            file.display()
        ),
        // The sender went away without sending: the target panicked (its
        // message is above).
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{target} on {} panicked", file.display())
        }
    }
    eprintln!("{target} {}: {:?}", file.display(), start.elapsed());
}

#[test]
fn regressions_and_seeds_run_cleanly() {
    let regressions = regressions();
    // One per bug fixed so far (fuzz/README.md's table).
    assert!(
        regressions.len() >= 4,
        "{} regression inputs under fuzz/regressions, expected at least 4",
        regressions.len()
    );
    let data = repo("crates/radix-cli/tests/data");
    let tiny = repo("crates/radix-models/tests/fixtures/tiny");
    let seeds = [
        ("mlir", data.join("sharded2d_shardy.mlir")),
        ("mlir", data.join("sharded_gspmd.mlir")),
        ("npz", data.join("ints_inputs.npz")),
        ("gguf", tiny.join("qwen2.q4_k_m.gguf")),
        ("tokenizer_gguf", tiny.join("llama.q4_k_m.gguf")),
        (
            "safetensors",
            tiny.join("qwen3/model-00002-of-00002.safetensors"),
        ),
        ("tokenizer_json", tiny.join("qwen3/tokenizer.json")),
    ];
    for (target, file) in regressions.into_iter().chain(seeds) {
        let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        run_within_deadline(target, &file, bytes);
    }
    targets::remove_scratch();
}
