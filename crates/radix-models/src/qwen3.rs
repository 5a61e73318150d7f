//! Qwen3 (Yang et al. 2025, <https://arxiv.org/abs/2505.09388>): LLaMA's
//! block without projection biases but with an RMS norm on each query and
//! key head (`attn_q_norm`, `attn_k_norm`) before the rotation, and heads
//! whose width the file gives (`qwen3.attention.key_length`, `head_dim`),
//! not always width / heads. Upstream code: `transformers`
//! `models/qwen3/modeling_qwen3.py`, llama.cpp `src/models/qwen3.cpp`.

use crate::transformer::Decoder;

/// The model: LLaMA's blocks, whose attention takes its differences
/// from the configuration (`DecoderConfig::arch`).
pub type Qwen3 = Decoder;
