//! The one block of every decoder radix runs: pre-norm attention and a
//! gated MLP, each added to the residual stream, with what Gemma 3 adds as
//! options read from the configuration (norms after attention and after
//! the MLP, and a GeGLU MLP where the others use SwiGLU).

use radix::nn::{GatedMlp, KvCache, Linear, RmsNorm};
use radix::{Module, Tensor};

use super::{Arch, Attention, DecoderConfig, Partials, Step};

/// One pre-norm transformer block (`blk.N` in GGUF).
#[derive(Module, Clone, Debug)]
pub struct Block {
    attn_norm: RmsNorm,
    #[module(prefix = "")]
    attn: Attention,
    /// Gemma 3's norm of the attention's output, before the residual add.
    #[module(rename = "post_attention_norm")]
    attn_post_norm: Option<RmsNorm>,
    ffn_norm: RmsNorm,
    #[module(prefix = "ffn_")]
    mlp: GatedMlp,
    /// Gemma 3's norm of the MLP's output, before the residual add.
    #[module(rename = "post_ffw_norm")]
    ffn_post_norm: Option<RmsNorm>,
    /// Whether the attention's and the MLP's outputs are this process's
    /// partial sums (tensor parallelism), to be summed over the processes.
    #[module(skip)]
    partials: Partials,
}

impl Block {
    /// Layer `layer`'s parameters (placeholders until loaded).
    pub fn new(cfg: &DecoderConfig, layer: usize) -> Block {
        let norm = || cfg.norm(("d", cfg.dim));
        let gemma = cfg.arch == Arch::Gemma3;
        let mlp = GatedMlp::new(("d", cfg.dim), cfg.ffn_dim);
        Block {
            attn_norm: norm(),
            attn: Attention::new(cfg, layer),
            attn_post_norm: gemma.then(norm),
            ffn_norm: norm(),
            mlp: if gemma { mlp.with_gelu_tanh() } else { mlp },
            ffn_post_norm: gemma.then(norm),
            partials: cfg.partials,
        }
    }

    /// `x` `(b, s, d)` at positions `pos`: `x + post(attn(norm(x)))`, then
    /// `+ post(mlp(norm(.)))` (`post` the identity unless the block has its
    /// norm), and the layer's cache with the tokens' keys and values
    /// written. In a tensor-parallel process, `attn(.)` and `mlp(.)` are
    /// its partial sums, summed over the processes first.
    pub fn forward(&self, x: Tensor, pos: Tensor, step: Step) -> (Tensor, KvCache) {
        let post = |norm: &Option<RmsNorm>, y: Tensor| match norm {
            Some(norm) => norm.forward(y),
            None => y,
        };
        let (a, cache) = self.attn.forward(self.attn_norm.forward(x), pos, step);
        let x = x + post(&self.attn_post_norm, self.partials.sum(a));
        let h = self.mlp.forward(self.ffn_norm.forward(x));
        (x + post(&self.ffn_post_norm, self.partials.sum(h)), cache)
    }

    /// Blocks of one kind trace to the same program, so a step run layer
    /// by layer compiles one executable per kind: a sliding-window layer
    /// and a global one are two kinds.
    pub fn kind(&self) -> u64 {
        self.attn.is_sliding().into()
    }

    /// What decides the block's program: its kind and its weights'
    /// shapes (a quantized file may store one layer's matrix in another
    /// block format). Blocks of one key run one executable, or one loop
    /// body over their stacked weights.
    pub(crate) fn program_key(&self) -> String {
        let shapes: Vec<_> = radix::module::tensors(self)
            .into_iter()
            .map(|(_, t)| t.shape())
            .collect();
        format!("{} {shapes:?}", self.kind())
    }

    /// The block's linear layers, each with its path in the block (the
    /// GGUF name of its weight without `.weight`: `attn_q`, `ffn_down`):
    /// where adapters go ([`Decoder::with_lora`](crate::lora)).
    ///
    /// [`Decoder::with_lora`]: super::Decoder::with_lora
    pub fn linears_mut(&mut self) -> Vec<(&'static str, &mut Linear)> {
        let mut res: Vec<_> = self.attn.linears_mut().into_iter().collect();
        let mlp = &mut self.mlp;
        res.extend([
            ("ffn_gate", &mut mlp.gate),
            ("ffn_up", &mut mlp.up),
            ("ffn_down", &mut mlp.down),
        ]);
        res
    }
}
