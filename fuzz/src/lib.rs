//! radix's file parsers as fuzz targets: the `.npy`/`.npz` reader and the
//! `@main` signature reader of `radix run` (their source files, shared with
//! the CLI), GGUF and safetensors (with its shard index), and the tokenizer
//! loaders. Each target is in [`targets`], which `radix-cli`'s
//! `fuzz_regressions` test also runs on the seeds and on every input a
//! crash was found with.

#[path = "../../crates/radix-cli/src/npy.rs"]
#[allow(dead_code, reason = "the writers serve the CLI, not the targets")]
pub mod npy;
#[path = "../../crates/radix-cli/src/signature.rs"]
#[allow(
    dead_code,
    reason = "the targets read signatures; the CLI checks inputs too"
)]
pub mod signature;
pub mod targets;
