//! The Gemma 3 270M vocabulary fixture (`fixtures/gemma3/`, made by its
//! `make.py`), shared by the tests that need a SentencePiece GGUF file, and
//! unzipping the zipped fixtures.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};

/// The folder of the Gemma 3 fixtures.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gemma3")
}

/// Unzips the vocabulary (a GGUF file without tensors) into `dir` and returns
/// the file's path.
pub fn gemma3_vocab(dir: &Path) -> PathBuf {
    unzip(
        &fixtures().join("vocab.gguf.zip"),
        "gemma-3-270m-vocab.gguf",
        dir,
    )
}

/// Unzips the file `name` of the zip archive `zip` into `dir` and returns its
/// path.
pub fn unzip(zip: &Path, name: &str, dir: &Path) -> PathBuf {
    let file = std::fs::File::open(zip).unwrap();
    let mut zip = zip::ZipArchive::new(file).unwrap();
    let mut entry = zip.by_name(name).unwrap();
    let mut bytes = vec![];
    entry.read_to_end(&mut bytes).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}
