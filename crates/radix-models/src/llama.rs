//! LLaMA (Touvron et al. 2023, <https://arxiv.org/abs/2302.13971>): pre-norm
//! blocks of RMSNorm, grouped-query attention with rotary positions and a
//! SwiGLU MLP; upstream code: Hugging Face `transformers`
//! `models/llama/modeling_llama.py` and llama.cpp `src/models/llama.cpp`.
//! Rotary scaling (linear, Llama 3, YaRN) comes from the file.
//!
//! GGUF stores `attn_q`/`attn_k` with rows permuted for adjacent-pair rotary
//! embeddings; they are used as stored, with [`RopeLayout::AdjacentPair`]
//! (a Hugging Face folder keeps the half-split layout).
//!
//! Its block is also that of Mistral, Qwen2 and Qwen3, whose attention
//! differs only in what [`Attention`] takes from the configuration.
//!
//! [`Attention`]: crate::transformer::Attention
//! [`RopeLayout::AdjacentPair`]: radix::nn::RopeLayout::AdjacentPair

use crate::transformer::{Decoder, DecoderConfig};

/// The hyper-parameters (the shared decoder configuration).
pub type LlamaConfig = DecoderConfig;

/// The model: embedding, [`Block`](crate::transformer::Block)s (pre-norm
/// attention and a SwiGLU MLP), final norm and (unless tied) output.
pub type Llama = Decoder;
