//! A small llama-style language model trained from scratch on a text file
//! (`fixtures/train_lm/text.md`, a copy of the repository's README as it was
//! when the test was written, so later edits of the README leave it alone;
//! bytes as tokens) with `radix::grad` and AdamW
//! (`radix_models::train::Trainer`, as `examples/train_lm.rs`): its loss
//! falls below half its starting value.

use radix::optim::Precision;
use radix::testing::platform;
use radix::{Buffer, DType, Shape, Tensor};
use radix_models::llama::Llama;
use radix_models::sampling::Rng;
use radix_models::train::{BYTE_LLAMA_ADAMW, Trainer, byte_llama, byte_window, init_weights};

const WINDOW: i64 = 65;

fn loss(m: &Llama, ids: &Tensor) -> Tensor {
    m.next_token_loss(*ids)
}

#[test]
fn the_loss_falls_below_half() {
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
        Precision::Full,
    )
    .unwrap();
    let mut losses = vec![];
    for _ in 0..400 {
        let ids = byte_window(text, WINDOW as usize, &mut rng);
        let batch = Buffer::from_slice(&p, &ids, shape).unwrap();
        losses.push(trainer.step(batch).unwrap());
    }
    let first = losses[0];
    let last = losses[losses.len() - 20..].iter().sum::<f32>() / 20.0;
    eprintln!("loss {first} -> {last} (mean of the last 20 steps)");
    // A byte model starts near ln 256 = 5.5.
    assert!((5.0..6.5).contains(&first), "first loss {first}");
    assert!(last < first / 2.0, "loss {first} -> {last}");
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
