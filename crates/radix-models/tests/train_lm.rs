//! A small llama-style language model trained from scratch on a text file
//! (`fixtures/train_lm/text.md`, a copy of the repository's README as it was
//! when the test was written, so later edits of the README leave it alone;
//! bytes as tokens) with `radix::grad` and AdamW
//! (`radix_models::train::Trainer`, as `examples/train_lm.rs`): its loss
//! falls below half its starting value; in bf16 mixed precision its loss
//! curve tracks f32's.

use radix::optim::{MixedPrecision, Precision};
use radix::testing::platform;
use radix::{Buffer, DType, Shape, Tensor};
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
    let text = include_bytes!("fixtures/train_lm/text.md");
    let p = platform();
    let model = Llama::new(&byte_llama());
    let mut rng = Rng::new(0);
    let weights = init_weights(&p, &model, &mut rng).unwrap();
    let shape = Shape::tagged(DType::I32, &[("b", 1), ("s", WINDOW)]);
    let mut trainer = Trainer::new(
        &p,
        &model,
        weights,
        &Tensor::param(shape),
        loss,
        BYTE_LLAMA_ADAMW,
        precision,
    )
    .unwrap();
    (0..steps)
        .map(|_| {
            let ids = byte_window(text, WINDOW as usize, &mut rng);
            let batch = Buffer::from_slice(&p, &ids, shape).unwrap();
            trainer.step(batch).unwrap()
        })
        .collect()
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
