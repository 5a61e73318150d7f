//! `radix cache {list,clear}` on a cache folder of its own.

mod common;

use common::{DEADLINE, radix as radix_cmd, wait_within};
use radix::{CacheKey, ExecutableCache};

fn radix(dir: &std::path::Path, args: &[&str]) -> String {
    let out = radix_cmd()
        .env("RADIX_CACHE_DIR", dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn list_and_clear() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ExecutableCache::new(&dir.path().join("executables"));
    let keys: Vec<CacheKey> = ["a", "b"]
        .iter()
        .map(|m| CacheKey::from_parts(m, b"", "sha", (0, 1), "host"))
        .collect();
    for k in &keys {
        cache.store(*k, b"payload").unwrap();
    }
    let text = radix(dir.path(), &["cache", "list"]);
    for k in &keys {
        assert!(text.contains(&k.to_string()), "{text}");
    }
    assert!(text.contains("2 executables"), "{text}");

    let json: serde_json::Value =
        serde_json::from_str(&radix(dir.path(), &["cache", "list", "--json"])).unwrap();
    assert_eq!(json["entries"].as_array().unwrap().len(), 2);
    // A 60-byte header (magic, version, key, length, HMAC-SHA256) and the payload.
    assert_eq!(json["entries"][0]["bytes"], 60 + 7);

    let json: serde_json::Value =
        serde_json::from_str(&radix(dir.path(), &["cache", "clear", "--json"])).unwrap();
    assert_eq!(json["removed"], 2);
    assert!(cache.list().unwrap().is_empty());
    let text = radix(dir.path(), &["cache", "list"]);
    assert!(text.contains("0 executables"), "{text}");
}

/// `radix cache` opens no platform: the platform flags are refused, not
/// ignored.
#[test]
fn platform_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for flag in [
        &["--platform", "cpu"][..],
        &["--devices", "2"],
        &["--plugin", "x.so"],
    ] {
        let out = radix_cmd()
            .env("RADIX_CACHE_DIR", dir.path())
            .args(["cache", "list"])
            .args(flag)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{flag:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with(&format!(
                "error: {} does not apply to `radix cache`",
                flag[0]
            )),
            "{err}"
        );
    }
}

/// A reader that closes the pipe early (`radix cache list | head -1`)
/// ends the output: no panic, no error line.
#[test]
fn a_closed_pipe_ends_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("radix"))
        .env("RADIX_CACHE_DIR", dir.path())
        .args(["cache", "list"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before the process starts writing.
    drop(child.stdout.take());
    let out = wait_within(child, DEADLINE, "radix cache list");
    assert!(out.status.success(), "{:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
