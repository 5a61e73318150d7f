//! Gemma 3 (Gemma Team 2025, <https://arxiv.org/abs/2503.19786>), text
//! decoder: embeddings scaled by `sqrt(width)`; blocks with RMS norms before
//! and after both attention and the MLP; RMS norms on each query and key
//! head; a GeGLU MLP (tanh GELU); five sliding-window layers with their own
//! rotary base (10000) for each global one. Upstream code: Hugging Face
//! `transformers` `models/gemma3/modeling_gemma3.py` and llama.cpp
//! `src/models/gemma3.cpp`.
//!
//! Gemma's RMS norms scale by `1 + weight`: Hugging Face checkpoints store
//! `weight`, GGUF files `1 + weight` (see [`DecoderConfig::norm_offset`]).

use crate::transformer::{Decoder, DecoderConfig};
use crate::{Error, Result};

/// The model: [`Decoder`], whose [`Block`](crate::transformer::Block)s
/// take Gemma's extra norms and GeGLU from the configuration
/// (`DecoderConfig::arch`).
pub type Gemma3 = Decoder;

/// What a GGUF file's `gemma3.*` metadata adds to the shared keys: the
/// sliding layers' rotary base (`rope.freq_base_swa`, 10000 when absent),
/// and the 27B model's score scale (llama.cpp's rule: `1 / sqrt(width /
/// heads)` for its 62 layers, `1 / sqrt(head width)` for the others). A
/// file that soft-caps its logits (`final_logit_softcapping`, Gemma 2's) is
/// refused: radix would compute other logits.
pub(crate) fn from_gguf(
    cfg: &mut DecoderConfig,
    positive_opt: impl Fn(&str) -> Result<Option<f64>>,
    bad: impl Fn(String) -> Error,
) -> Result<()> {
    if positive_opt("final_logit_softcapping")?.is_some() {
        return Err(bad(
            "metadata gemma3.final_logit_softcapping is set; radix has no soft-capping".into(),
        ));
    }
    cfg.rope_theta_sliding = positive_opt("rope.freq_base_swa")?.unwrap_or(10000.0);
    if cfg.n_layers == 62 {
        cfg.attn_scale = 1.0 / ((cfg.dim / cfg.n_heads) as f64).sqrt();
    }
    Ok(())
}
