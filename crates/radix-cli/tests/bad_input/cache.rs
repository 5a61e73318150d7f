//! Executable-cache entries, damaged after a first `radix generate` of the
//! tiny Llama filled a cache folder of their own: cut short, emptied,
//! overwritten with garbage or with the plugin's own machine code, one
//! byte flipped, left marked as a load that crashed, or in a folder others
//! can write. None is an error: each run prints the same ids as the first,
//! without a panic or a signal, under 1 GiB, and each damaged entry is
//! recompiled and replaced (or, in a folder others can write, not used).
//! `radix cache list` and `clear` read such a folder without failing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common::{radix_release, run_measured};
use crate::{Case, check, tiny};

/// `radix generate --json` of the tiny Llama with cache folder `cache`:
/// its output, after checking that it ran cleanly.
fn generate(cache: &Path, plugin: &Path) -> serde_json::Value {
    let mut cmd = radix_release();
    cmd.args(["generate", "--json", "--max-tokens", "4", "--model"])
        .arg(tiny("llama.f32.gguf"))
        .arg("the quick brown fox")
        .env("RADIX_CACHE_DIR", cache)
        .env("RADIX_PJRT_PLUGIN", plugin);
    let (out, peak) = run_measured(&mut cmd, "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(peak < 1 << 30, "{peak} bytes at the peak: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json
}

/// The entries (`*.pjrt`) of folder `dir`.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pjrt"))
        .collect();
    v.sort();
    v
}

#[test]
fn damaged_cache_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let plugin = radix_pjrt::provision::locate(radix_pjrt::provision::Target::Cpu, None).unwrap();
    let pristine = tmp.path().join("pristine");
    let want = generate(&pristine, &plugin)["ids"].clone();
    let exes = pristine.join("executables");
    let n = entries(&exes).len();
    assert!(n >= 3, "{n} entries");
    let so = std::fs::read(&plugin).unwrap();
    let so_head = &so[..1 << 20];

    type Damage = fn(&Path, &[u8]);
    let damages: [(&str, Damage); 7] = [
        ("cut in half", |p, _| {
            let b = std::fs::read(p).unwrap();
            std::fs::write(p, &b[..b.len() / 2]).unwrap();
        }),
        ("emptied", |p, _| std::fs::write(p, b"").unwrap()),
        ("garbage of the same length", |p, _| {
            let n = std::fs::metadata(p).unwrap().len() as usize;
            let garbage: Vec<u8> = (0..n).map(|i| (i * 7 + 13) as u8).collect();
            std::fs::write(p, garbage).unwrap();
        }),
        ("the plugin's machine code", |p, so| {
            std::fs::write(p, so).unwrap()
        }),
        ("one payload byte flipped", |p, _| {
            let mut b = std::fs::read(p).unwrap();
            let at = b.len() - 100;
            b[at] ^= 0x10;
            std::fs::write(p, b).unwrap();
        }),
        ("one header byte flipped", |p, _| {
            let mut b = std::fs::read(p).unwrap();
            b[20] ^= 0x01;
            std::fs::write(p, b).unwrap();
        }),
        ("marked as a load that crashed", |p, _| {
            let name = p.file_stem().unwrap().to_string_lossy();
            let marker = p.with_file_name(format!(".{name}.loading.tmp"));
            // No process has this pid.
            std::fs::write(marker, u32::MAX.to_string()).unwrap();
        }),
    ];
    let mut cases = 0;
    for (what, damage) in damages {
        eprintln!("case: an entry {what}");
        let cache = tmp.path().join(what.replace(' ', "_"));
        copy_tree(&pristine, &cache);
        let exes = cache.join("executables");
        let mut damaged = Vec::new();
        for e in entries(&exes) {
            damage(&e, so_head);
            damaged.push((e.clone(), std::fs::read(&e).unwrap()));
        }
        let got = generate(&cache, &plugin)["ids"].clone();
        assert_eq!(got, want, "{what}");
        for (e, bytes) in damaged {
            let now = std::fs::read(&e).unwrap();
            if what.starts_with("marked") {
                let name = e.file_stem().unwrap().to_string_lossy();
                assert!(!e.with_file_name(format!(".{name}.loading.tmp")).exists());
            } else {
                assert_ne!(now, bytes, "{what}: {e:?} was not replaced");
            }
        }
        assert_eq!(entries(&exes).len(), n, "{what}");
        cases += 1;
    }

    eprintln!("case: a cache folder others can write");
    let open = tmp.path().join("open");
    copy_tree(&pristine, &open);
    let exes = open.join("executables");
    for e in entries(&exes) {
        std::fs::write(&e, b"planted").unwrap();
    }
    std::fs::set_permissions(&exes, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(generate(&open, &plugin)["ids"], want);
    for e in entries(&exes) {
        assert_eq!(
            std::fs::read(&e).unwrap(),
            b"planted",
            "not read, not written"
        );
    }
    cases += 1;

    // `radix cache list` and `clear` on damaged entries: a listing, then
    // an empty folder.
    let listed = tmp.path().join("listed");
    copy_tree(&pristine, &listed);
    for e in entries(&listed.join("executables")) {
        std::fs::write(&e, b"garbage").unwrap();
    }
    for (args, want) in [
        (&["cache", "list", "--json"][..], "\"entries\"".to_string()),
        (&["cache", "clear", "--json"], format!("\"removed\":{n}")),
    ] {
        eprintln!("case: radix {args:?} on damaged entries");
        let mut cmd = radix_release();
        cmd.args(args).env("RADIX_CACHE_DIR", &listed);
        let (out, _) = run_measured(&mut cmd, "");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {:?} {stdout}", out.status);
        assert!(stdout.contains(&want), "{stdout}");
        cases += 1;
    }
    assert!(entries(&listed.join("executables")).is_empty());

    // A cache folder that is a file: one error line from `radix cache list`.
    let d = tmp.path().join("bad");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("a_file"), "not a folder").unwrap();
    cases += check(
        &d,
        vec![
            Case::new(
                "a cache folder that is a file",
                &[&"cache", &"list"],
                "a_file",
            )
            .env("RADIX_CACHE_DIR", d.join("a_file")),
        ],
    );
    eprintln!("{cases} cache cases");
}

/// Copies folder `from` into `to`, recursively (the cache is two levels).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let mode = std::fs::metadata(from).unwrap().permissions().mode();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode)).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
