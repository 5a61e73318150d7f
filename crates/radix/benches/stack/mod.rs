//! The transformer-block stack both benches trace: SmolLM2-shaped (d=576,
//! 9 heads, gated FFN 1536, 128 tokens), written with tagged axes.

use radix::{DType, Module, Shape, Size, Tensor};

pub const D: i64 = 576;
const HEADS: i64 = 9;
const FFN: i64 = 1536;
const SEQ: i64 = 128;

#[derive(Clone, Module)]
struct Linear {
    weight: Tensor,
}

impl Linear {
    fn new(d_in: i64, d_out: i64) -> Linear {
        Linear {
            weight: Tensor::param(Shape::tagged(DType::F32, &[("dout", d_out), ("d", d_in)])),
        }
    }

    fn forward(&self, x: Tensor) -> Tensor {
        x.dot(self.weight, "d").rename("dout", "d")
    }
}

#[derive(Clone, Module)]
pub struct Block {
    norm1: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    norm2: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

fn rms_norm(x: Tensor, scale: Tensor) -> Tensor {
    let ms = (x * x).mean("d").broadcast(x.shape());
    x * (ms + 1e-5).rsqrt() * scale.broadcast(x.shape())
}

impl Block {
    pub fn new() -> Block {
        let norm = || Tensor::param(Shape::tagged(DType::F32, &[("d", D)]));
        Block {
            norm1: norm(),
            q: Linear::new(D, D),
            k: Linear::new(D, D),
            v: Linear::new(D, D),
            o: Linear::new(D, D),
            norm2: norm(),
            gate: Linear::new(D, FFN),
            up: Linear::new(D, FFN),
            down: Linear::new(FFN, D),
        }
    }

    pub fn forward(&self, x: Tensor) -> Tensor {
        let h = rms_norm(x, self.norm1);
        let heads = |l: &Linear, s: &str| {
            l.forward(h)
                .split_axis("d", &[("h", HEADS.into()), ("hd", Size::Auto)])
                .rename("s", s)
        };
        let (q, k, v) = (
            heads(&self.q, "q"),
            heads(&self.k, "k"),
            heads(&self.v, "k"),
        );
        let scores = q.dot(k, "hd") * (1.0 / 8.0);
        let attn = scores
            .softmax("k")
            .dot(v, "k")
            .transpose(["q", "h", "hd"])
            .merge_axes(["h", "hd"], "d")
            .rename("q", "s");
        let x = x + self.o.forward(attn);
        let h = rms_norm(x, self.norm2);
        let gate = self.gate.forward(h).rename("d", "f").silu();
        let up = self.up.forward(h).rename("d", "f");
        x + self.down.forward((gate * up).rename("f", "d"))
    }
}

/// `n` blocks and the `(s, d)` input they run on.
pub fn stack(n: usize) -> (Vec<Block>, Tensor) {
    let layers = (0..n).map(|_| Block::new()).collect();
    let x = Tensor::param(Shape::tagged(DType::F32, &[("s", SEQ), ("d", D)]));
    (layers, x)
}

/// The stack's forward: the blocks applied in order.
#[allow(
    clippy::ptr_arg,
    reason = "`radix::trace` passes the model as `&Vec<Block>`"
)]
pub fn forward(layers: &Vec<Block>, x: Tensor) -> Tensor {
    layers.iter().fold(x, |x, b| b.forward(x))
}
