//! Plugin files given by `--plugin` or `RADIX_PJRT_PLUGIN`: missing, a
//! folder, empty, text, the real plugin cut short, shared libraries that
//! are not PJRT plugins (none of PJRT's entry point, one that returns no
//! API, one whose API table is all zeros), built here with the system's C
//! compiler (the one Rust links with).

use std::path::Path;

use crate::{Case, check, data, write};

/// Builds `dir/name` from C `source` as a shared library.
fn shared_library(dir: &Path, name: &str, source: &str) {
    let c = write(dir, &format!("{name}.c"), source);
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join(name))
        .arg(&c)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc {name}");
}

#[test]
fn plugin_files() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let real = radix_pjrt::provision::locate(radix_pjrt::provision::Target::Cpu, None).unwrap();
    let bytes = std::fs::read(&real).unwrap();
    write(d, "cut.so", &bytes[..4 << 20]);
    drop(bytes);
    write(d, "empty.so", b"");
    write(d, "text.so", b"this is not a shared library\n");
    std::fs::create_dir(d.join("folder.so")).unwrap();
    shared_library(d, "not_pjrt.so", "int answer(void) { return 42; }\n");
    shared_library(d, "null_api.so", "void *GetPjrtApi(void) { return 0; }\n");
    shared_library(
        d,
        "zero_api.so",
        "static char api[4096];\nvoid *GetPjrtApi(void) { return api; }\n",
    );
    write(
        d,
        "softmax.mlir",
        std::fs::read(data("softmax.mlir")).unwrap(),
    );
    write(
        d,
        "in.npz",
        std::fs::read(data("softmax_inputs.npz")).unwrap(),
    );

    let mut cases = Vec::new();
    for (what, file, want) in [
        ("a missing plugin", "missing.so", "missing.so"),
        ("a folder", "folder.so", "folder.so"),
        ("an empty file", "empty.so", "empty.so"),
        ("a text file", "text.so", "text.so"),
        ("the plugin cut short", "cut.so", "cut.so"),
        ("a library without GetPjrtApi", "not_pjrt.so", "GetPjrtApi"),
        (
            "a GetPjrtApi that returns null",
            "null_api.so",
            "null_api.so",
        ),
        ("an API table of zeros", "zero_api.so", "zero_api.so"),
    ] {
        cases.push(Case::new(what, &[&"devices", &"--plugin", &file], want));
        cases.push(
            Case::new(what, &[&"devices", &"--platform", &"cpu"], want)
                .env("RADIX_PJRT_PLUGIN", file),
        );
        cases.push(Case::new(
            what,
            &[
                &"run",
                &"softmax.mlir",
                &"--inputs",
                &"in.npz",
                &"--plugin",
                &file,
            ],
            want,
        ));
    }
    eprintln!("{} plugin cases", check(d, cases));
}
