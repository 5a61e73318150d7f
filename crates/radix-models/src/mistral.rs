//! Mistral 7B (Jiang et al. 2023, <https://arxiv.org/abs/2310.06825>):
//! LLaMA's block with sliding-window attention: each query sees its
//! `sliding_window` latest positions. llama.cpp's converter writes Mistral
//! checkpoints as `llama` GGUF files, without the window; a Hugging Face
//! folder (`model_type` `mistral`) keeps it. Upstream code: `transformers`
//! `models/mistral/modeling_mistral.py`.

use crate::transformer::Decoder;

/// The model: LLaMA's blocks, whose attention takes its differences
/// from the configuration (`DecoderConfig::arch`).
pub type Mistral = Decoder;
