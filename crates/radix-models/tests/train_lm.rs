//! A small llama-style language model trained from scratch on a text file
//! (`fixtures/train_lm/text.md`, a copy of the repository's README as it was
//! when the test was written, so later edits of the README leave it alone;
//! bytes as tokens) with `radix::grad` and AdamW
//! (`radix_models::train::Trainer`, as `examples/train_lm.rs`): its loss
//! falls below half its starting value; in bf16 mixed precision its loss
//! curve tracks f32's; trained data-parallel over 2 and 3 processes
//! (`Trainer::data_parallel`), its losses are one process's on the same
//! global batches and its weights the same bits on every process.

use std::time::Duration;

use radix::collective::{process_count, process_index};
use radix::optim::{AdamW, MixedPrecision, Precision};
use radix::testing::{Tol, platform};
use radix::{Buffer, Bufferized, DType, Platform, Shape, Tensor};
use radix_models::llama::Llama;
use radix_models::sampling::Rng;
use radix_models::train::{BYTE_LLAMA_ADAMW, Trainer, byte_llama, byte_window, init_weights};

const WINDOW: i64 = 65;

fn loss(m: &Llama, ids: &Tensor) -> Tensor {
    m.next_token_loss(*ids)
}

/// The losses of `steps` steps of the small llama trained in `precision`
/// on windows of the fixture, weights and windows drawn from seed 0.
fn train(precision: Precision, steps: usize) -> Vec<f32> {
    let (mut trainer, mut rng) = trainer(Trainer::new, precision, 1);
    (0..steps)
        .map(|_| trainer.step(batch(&windows(1, &mut rng))).unwrap())
        .collect()
}

/// How a test builds its trainer: `Trainer::new` or `Trainer::data_parallel`.
type NewTrainer = fn(
    &Platform,
    &Llama,
    Bufferized<Llama>,
    &Tensor,
    fn(&Llama, &Tensor) -> Tensor,
    AdamW,
    Precision,
) -> radix_models::Result<Trainer<Llama, Tensor>>;

/// The small llama's trainer for batches of `rows` windows, built by `new`
/// in `precision` from weights drawn from seed 0, and that generator,
/// which then draws the windows.
fn trainer(new: NewTrainer, precision: Precision, rows: i64) -> (Trainer<Llama, Tensor>, Rng) {
    let model = Llama::new(&byte_llama());
    let mut rng = Rng::new(0);
    let weights = init_weights(&platform(), &model, &mut rng).unwrap();
    let batch = Tensor::param(batch_shape(rows));
    let trainer = new(
        &platform(),
        &model,
        weights,
        &batch,
        loss,
        BYTE_LLAMA_ADAMW,
        precision,
    );
    (trainer.unwrap(), rng)
}

fn batch_shape(rows: i64) -> Shape {
    Shape::tagged(DType::I32, &[("b", rows), ("s", WINDOW)])
}

/// `rows` windows of the fixture drawn with `rng`, one after another.
fn windows(rows: usize, rng: &mut Rng) -> Vec<i32> {
    let text = include_bytes!("fixtures/train_lm/text.md");
    (0..rows)
        .flat_map(|_| byte_window(text, WINDOW as usize, rng))
        .collect()
}

/// Windows as a batch on the device.
fn batch(ids: &[i32]) -> Buffer {
    let rows = ids.len() as i64 / WINDOW;
    Buffer::from_slice(&platform(), ids, batch_shape(rows)).unwrap()
}

#[test]
fn the_loss_falls_below_half() {
    let losses = train(Precision::Full, 400);
    let first = losses[0];
    let last = losses[losses.len() - 20..].iter().sum::<f32>() / 20.0;
    eprintln!("loss {first} -> {last} (mean of the last 20 steps)");
    // A byte model starts near ln 256 = 5.5.
    assert!((5.0..6.5).contains(&first), "first loss {first}");
    assert!(last < first / 2.0, "loss {first} -> {last}");
}

/// Trained in bf16 mixed precision (bf16 forward and backward, f32 master
/// weights and AdamW) from the same weights on the same windows, the loss
/// curve stays within two bf16 roundings (2^-8 each) of f32's at each of
/// 20 steps, and falls as f32's does.
#[test]
fn the_bf16_loss_curve_tracks_f32s() {
    let f32s = train(Precision::Full, 20);
    let bf16s = train(Precision::Mixed(MixedPrecision::BF16), 20);
    eprintln!("f32  {f32s:.4?}\nbf16 {bf16s:.4?}");
    // The loss is an f32 mean of log-softmaxes of bf16 logits; each logit is
    // off by a rounding or so, and 20 steps of AdamW at lr 3e-3 barely move
    // the two runs' weights apart (when written, at most 0.4 of a rounding).
    for (k, (&a, &b)) in f32s.iter().zip(&bf16s).enumerate() {
        assert!(
            (a - b).abs() <= 2.0 / 256.0 * a,
            "step {k}: bf16 loss {b} against f32's {a}\nf32  {f32s:?}\nbf16 {bf16s:?}"
        );
    }
    assert!(
        f32s.iter().zip(&bf16s).any(|(a, b)| (a - b).abs() > 1e-4),
        "the bf16 losses equal f32's: bf16 did not run"
    );
    let last = bf16s[15..].iter().sum::<f32>() / 5.0;
    assert!(last < 0.75 * bf16s[0], "bf16 loss {} -> {last}", bf16s[0]);
}

/// `next_token_loss` of a batch is the mean over its rows, each row a
/// sequence of its own: the loss of 3 windows together equals the mean of
/// each window's alone.
#[test]
fn a_batch_loss_is_the_mean_of_its_rows() {
    let text = include_bytes!("fixtures/train_lm/text.md");
    let p = platform();
    let model = Llama::new(&byte_llama());
    let mut rng = Rng::new(1);
    let weights = init_weights(&p, &model, &mut rng).unwrap();
    // The loss of the windows in `ids` as one batch.
    let loss_of = |ids: &[i32]| -> f32 {
        let rows = (ids.len() as i64) / WINDOW;
        let shape = Shape::tagged(DType::I32, &[("b", rows), ("s", WINDOW)]);
        let exe = radix::compile(&p, &model, &Tensor::param(shape), |m, ids| {
            m.next_token_loss(ids)
        })
        .unwrap();
        let ids = Buffer::from_slice(&p, ids, shape).unwrap();
        exe.call(&weights, ids).unwrap().to_vec::<f32>().unwrap()[0]
    };
    let windows: Vec<Vec<i32>> = (0..3)
        .map(|_| byte_window(text, WINDOW as usize, &mut rng))
        .collect();
    let alone: Vec<f32> = windows.iter().map(|w| loss_of(w)).collect();
    let together = loss_of(&windows.concat());
    let mean = alone.iter().sum::<f32>() / 3.0;
    // Sums over 3 × 64 positions of f32 log-probabilities near 5.5.
    assert!(
        (together - mean).abs() <= 1e-5 * mean.abs() + 1e-6,
        "together {together}, rows alone {alone:?} (mean {mean})"
    );
    assert!(
        alone.iter().any(|&l| (l - mean).abs() > 1e-3),
        "the windows differ: {alone:?}"
    );
}

/// Global batches of this many windows: 2 and 3 processes share them.
const GLOBAL_ROWS: usize = 6;
/// Steps the data-parallel test takes.
const DP_STEPS: usize = 8;

/// Trained over 2 and 3 processes, each stepping on its share of a global
/// batch of [`GLOBAL_ROWS`] windows, the loss of each step is what one
/// process's step on the whole global batch gives (the run that each rank
/// also makes alone, beside the job's), and the weights end the same bits
/// on every rank.
#[test]
fn data_parallel_steps_are_the_global_batchs() {
    let name = "data_parallel_steps_are_the_global_batchs";
    if !radix_mpi::launched() {
        for n in [2, 3] {
            let env = [("RADIX_MPI_TIMEOUT", "60")];
            let deadline = Duration::from_secs(300);
            let out = radix_mpi::run_test_as_ranks(name, n, &env, deadline).unwrap();
            let all = format!("{}\n{}", out.stdout, out.stderr);
            assert!(out.status.success(), "{n} ranks: {}\n{all}", out.status);
            eprintln!("{all}");
            let digests: Vec<&str> = all
                .lines()
                .filter_map(|l| l.split_once(": weights sha256 ").map(|(_, d)| d.trim()))
                .collect();
            assert_eq!(digests.len(), n, "a digest per rank:\n{all}");
            assert!(
                digests.iter().all(|d| *d == digests[0]),
                "the ranks' weights differ: {digests:?}"
            );
        }
        return;
    }
    let (rank, n) = (process_index().unwrap(), process_count().unwrap());
    let share = GLOBAL_ROWS / n;
    let (mut alone, mut rng) = trainer(Trainer::new, Precision::Full, GLOBAL_ROWS as i64);
    let (mut job, _) = trainer(Trainer::data_parallel, Precision::Full, share as i64);
    for step in 0..DP_STEPS {
        let ids = windows(GLOBAL_ROWS, &mut rng);
        let mine = &ids[rank * share * WINDOW as usize..][..share * WINDOW as usize];
        let want = alone.step(batch(&ids)).unwrap();
        let got = job.step(batch(mine)).unwrap();
        // Both are means of the same GLOBAL_ROWS × 64 log-probabilities
        // (about 5.5 each), summed in other orders; after the first step
        // the weights also differ by the updates' roundings, which move
        // the loss by far less than the sum's own rounding allows.
        let tol = Tol::sum(DType::F32, GLOBAL_ROWS * 64, 6.0);
        assert!(
            tol.close(f64::from(got), f64::from(want)),
            "rank {rank} of {n}, step {step}: loss {got} against one process's {want}"
        );
        eprintln!("rank {rank} of {n}, step {step}: loss {got} (one process {want})");
    }
    println!(
        "rank {rank} of {n}: weights sha256 {}",
        job.weights_sha256().unwrap()
    );
}
