//! Qwen2 (Yang et al. 2024, <https://arxiv.org/abs/2407.10671>): LLaMA's
//! block with biases on the query, key and value projections (`attn_q.bias`,
//! ... in GGUF), rotary pairs in the half-split layout in both GGUF and
//! Hugging Face files. Upstream code: `transformers`
//! `models/qwen2/modeling_qwen2.py`, llama.cpp `src/models/qwen2.cpp`.

use crate::transformer::Decoder;

/// The model: LLaMA's blocks, whose attention takes its differences
/// from the configuration (`DecoderConfig::arch`).
pub type Qwen2 = Decoder;
