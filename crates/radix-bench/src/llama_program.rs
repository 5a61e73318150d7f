//! The program the tracing and warm-start comparisons use: SmolLM2's
//! prefill over 128 tokens (30 unrolled blocks, d=576, 9 query and 3
//! key/value heads, SwiGLU 1536, rotary positions, a 256-position KV cache
//! written in place, logits of the last token; each block one call of the
//! same function), traced from
//! `radix_models::llama::Llama`, the same model code the engine runs.
//! `bench/py/jax_llama.py` writes the same computation in JAX.

use radix::Program;
use radix_models::llama::{Llama, LlamaConfig};
use radix_models::transformer::Arch;

pub const DESCRIPTION: &str = "SmolLM2-135M prefill: 30 unrolled llama blocks (d=576, 9/3 heads, FFN 1536), \
     128 tokens, 256-position KV cache per layer, weights as arguments";

pub const PROMPT: i64 = 128;
pub const CAPACITY: i64 = 256;

/// SmolLM2-135M's dimensions, as its GGUF metadata gives them.
pub fn smollm2_config() -> LlamaConfig {
    LlamaConfig {
        rope_theta: 100_000.0,
        ..LlamaConfig::new(Arch::Llama, 30, 576, (9, 3), 1536, 49152)
    }
}

/// Traces the prefill step as the generator compiles it
/// (`radix_models::engine::trace_step`): weights, then `ids (b, s)`,
/// `start`, `last` and each layer's keys and values; results are the logits
/// and the caches.
pub fn prefill(cfg: &LlamaConfig) -> radix::Result<Program> {
    radix_models::engine::trace_step(&Llama::new(cfg), PROMPT as usize, CAPACITY as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_program_has_smollm2s_arguments() {
        let program = prefill(&smollm2_config()).unwrap();
        // The GGUF's 272 tensors, then ids, start, last and the caches.
        assert_eq!(program.n_weights(), 272);
        assert_eq!(program.args().len(), 275 + 2 * 30);
        // The logits, then each layer's keys and values.
        assert_eq!(program.results().len(), 1 + 2 * 30);
        assert_eq!(program.results()[1].shape.dims(), [1, 256, 3, 64]);
        assert_eq!(program.results()[0].shape.dims(), [1, 49152]);
    }
}
