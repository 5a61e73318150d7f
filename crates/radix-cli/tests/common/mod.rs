//! What the CLI tests share: running the binary, the reference folder, and
//! the check that bad input fails with one clear error line.

#![allow(dead_code, reason = "each test binary uses a part of this module")]

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// The `radix` binary, with backtraces on so that a panic would show.
pub fn radix() -> Command {
    let mut cmd = Command::cargo_bin("radix").expect("the radix binary");
    cmd.env_remove("RUST_LOG").env("RUST_BACKTRACE", "1");
    cmd
}

/// `RADIX_TEST_REFERENCE_DIR`, else `shared/reference` beside the repository.
pub fn reference_dir() -> PathBuf {
    match std::env::var_os("RADIX_TEST_REFERENCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference"),
    }
}

/// Runs `cmd` and checks that it fails with exactly one error line, the last
/// on stderr, containing `want`, and no panic or backtrace.
pub fn fails_with_one_error(cmd: &mut Command, want: &str) {
    let out = cmd.assert().failure().get_output().clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert_eq!(stderr.lines().last(), Some(errors[0]), "{stderr}");
    assert!(errors[0].contains(want), "{want:?} not in {stderr}");
}
pub mod server;
