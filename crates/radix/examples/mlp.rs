//! A 2-layer MLP written with `#[derive(Module)]`, compiled and run on the CPU,
//! in the spirit of ZML's MNIST example: the struct is the argument ABI (its
//! weights are the same struct with buffer leaves), axes are named, and
//! `forward` contracts by tag.
//!
//! Run with `cargo run -p radix --example mlp`.

use radix::{Buffer, DType, Module, Platform, Shape, Tensor};

/// A dense layer: `y[.., dout] = x[.., d] . weight[dout, d] + bias[dout]`.
#[derive(Clone, Module)]
struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    fn new(d_in: i64, d_out: i64) -> Linear {
        Linear {
            weight: Tensor::param(Shape::tagged(DType::F32, &[("dout", d_out), ("d", d_in)])),
            bias: Tensor::param(Shape::tagged(DType::F32, &[("dout", d_out)])),
        }
    }

    fn forward(&self, x: Tensor) -> Tensor {
        let y = x.dot(self.weight, "d");
        (y + self.bias.broadcast(y.shape())).rename("dout", "d")
    }
}

/// The MNIST classifier: 784 pixels -> 128 hidden units (ReLU) -> 10 logits.
#[derive(Clone, Module)]
struct Mnist {
    layers: [Linear; 2],
}

impl Mnist {
    fn forward(&self, image: Tensor) -> Tensor {
        let x = image.convert(DType::F32).merge_axes(["h", "w"], "d") / 255.0;
        let x = self.layers[0].forward(x).relu();
        self.layers[1].forward(x).argmax("d")
    }
}

fn main() -> radix::Result<()> {
    let platform = Platform::auto()?;
    let model = Mnist {
        layers: [Linear::new(784, 128), Linear::new(128, 10)],
    };
    let image = Tensor::param(Shape::tagged(DType::U8, &[("b", 4), ("h", 28), ("w", 28)]));
    let exe = radix::compile(&platform, &model, &image, |m, x| m.forward(x))?;

    // Deterministic stand-in weights, made by path into the same tree with
    // buffer leaves (a real run reads them from a file: `nn::load_weights`).
    let weights: radix::Bufferized<Mnist> = model.map(&mut String::new(), &mut |path, t| {
        let n = t.shape().count();
        let seed = path.len();
        let values: Vec<f32> = (0..n)
            .map(|k| (((k * 7919 + seed * 31) % 97) as f32 / 97.0 - 0.5) * 0.1)
            .collect();
        println!("{path:>16}  {}", t.shape());
        Buffer::from_slice(&platform, &values, t.shape())
    })?;

    let pixels: Vec<u8> = (0..4 * 28 * 28).map(|k| ((k * 13) % 256) as u8).collect();
    let input = Buffer::from_slice(&platform, &pixels, image.shape())?;
    let digits = exe.call(&weights, input)?;
    println!(
        "predicted digits {} = {:?}",
        digits.shape(),
        digits.to_vec::<i32>()?
    );
    Ok(())
}
