//! The executable cache, dumps and compile configuration, through the CPU plugin.

use std::path::Path;

use radix::cache::CacheKey;
use radix::testing::{platform, trace_fn};
use radix::{
    Buffer, CacheMode, CompileConfig, DType, DumpConfig, ExecutableCache, Literal, Origin, Program,
    Shape, Tensor, XlaDump,
};
use radix_pjrt::OverrideValue;

fn input() -> Literal {
    Literal::from_slice(&[1f32, -2., 3., 4.5, -0.5, 6.], &[2, 3])
}

/// A small two-layer program; `scale` makes distinct programs.
fn program(scale: f64) -> Program {
    trace_fn(&[input()], |xs| {
        let w = Tensor::from_slice(&[0.5f32, -1., 2., 1.5, 0.25, -0.75], &[3, 2]);
        let h = xs[0].matmul(w).tanh();
        (h * scale).exp().sum(1)
    })
    .unwrap()
}

fn config(cache: &Path) -> CompileConfig {
    let mut config = CompileConfig::new(&platform());
    config.cache = CacheMode::Dir(cache.to_path_buf());
    config.dump = None;
    config
}

/// Compiles `program` with `config` and runs it on [`input`].
fn compile_and_run(program: Program, config: &CompileConfig) -> (Origin, CacheKey, Vec<f64>) {
    let platform = platform();
    let exe = radix::compile_program_with(&platform, program, config).unwrap();
    let x = Buffer::from_literal(&platform, &input()).unwrap();
    let y = exe.call(&[&x]).unwrap();
    let values = y[0].to_literal().unwrap().data().to_vec();
    (exe.origin(), exe.key(), values)
}

#[test]
fn second_compile_loads_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let (origin, key, first) = compile_and_run(program(1.0), &config);
    assert_eq!(origin, Origin::Compiled);
    let cache = ExecutableCache::new(dir.path());
    let path = cache.path(key);
    let written = std::fs::metadata(&path).unwrap().modified().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let (origin, key2, second) = compile_and_run(program(1.0), &config);
    assert_eq!((origin, key2), (Origin::Cache, key));
    assert_eq!(first, second);
    // Loading does not rewrite the entry, only touches it (recently used:
    // the last to be evicted).
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert!(std::fs::metadata(&path).unwrap().modified().unwrap() >= written);
    // Another program, another entry.
    let (origin, key3, _) = compile_and_run(program(2.0), &config);
    assert_eq!(origin, Origin::Compiled);
    assert_ne!(key3, key);
    let keys: Vec<CacheKey> = cache.list().unwrap().iter().map(|e| e.key).collect();
    assert_eq!(keys.len(), 2);
    assert!(keys.contains(&key) && keys.contains(&key3));
}

#[test]
fn unusable_entries_are_recompiled_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let (_, key, want) = compile_and_run(program(3.0), &config);
    let path = ExecutableCache::new(dir.path()).path(key);
    let good = std::fs::read(&path).unwrap();
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0xff;
    let damaged: [(&str, Vec<u8>); 4] = [
        ("truncated", good[..good.len() / 3].to_vec()),
        ("corrupt", flipped),
        ("foreign", b"an executable from another tool".to_vec()),
        ("empty", vec![]),
    ];
    for (what, bytes) in damaged {
        std::fs::write(&path, &bytes).unwrap();
        let (origin, key2, got) = compile_and_run(program(3.0), &config);
        assert_eq!((origin, key2), (Origin::Compiled, key), "{what}");
        assert_eq!(got, want, "{what}");
        // The entry was replaced by a good one.
        let (origin, _, _) = compile_and_run(program(3.0), &config);
        assert_eq!(origin, Origin::Cache, "{what}");
    }
    // A well-formed entry whose payload the plugin rejects (as one from
    // another plugin build would be): a clean PJRT error, then a recompile.
    let cache = ExecutableCache::new(dir.path());
    cache.store(key, b"not a serialized executable").unwrap();
    let (origin, _, got) = compile_and_run(program(3.0), &config);
    assert_eq!((origin, got), (Origin::Compiled, want));
    let (origin, _, _) = compile_and_run(program(3.0), &config);
    assert_eq!(origin, Origin::Cache);
}

#[test]
fn disabled_cache_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.cache = CacheMode::Disabled;
    for _ in 0..2 {
        let (origin, _, _) = compile_and_run(program(4.0), &config);
        assert_eq!(origin, Origin::Compiled);
    }
    assert!(ExecutableCache::new(dir.path()).list().unwrap().is_empty());
}

#[test]
fn concurrent_compiles_of_one_module_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    // Two child processes (this test binary, running `concurrent_child`) and
    // two threads, all compiling the same module into the same cache.
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "concurrent_child",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("RADIX_TEST_CACHE_CHILD", dir.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || compile_and_run(program(5.0), &config(&dir)))
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results[0].2, results[1].2);
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("child compiled"), "{stdout}");
    }
    let entries = ExecutableCache::new(dir.path()).list().unwrap();
    assert_eq!(entries.len(), 1);
    let (origin, _, got) = compile_and_run(program(5.0), &config(dir.path()));
    assert_eq!(origin, Origin::Cache);
    assert_eq!(got, results[0].2);
    // No temporary files are left behind: the entry and the folder's
    // secret remain.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [".secret".to_string(), format!("{}.pjrt", entries[0].key)]
    );
}

/// Threads of one process storing their first entries into a new folder at
/// once (as a model's executables, compiled on threads of their own, do)
/// all store them: each makes the folder's secret under a name of its own,
/// and the first one linked is everyone's.
#[test]
fn first_entries_stored_at_once_by_threads_all_land() {
    let key = |k: u8| CacheKey::from_parts(&k.to_string(), &[], "", (0, 0), "");
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let cache = ExecutableCache::new(dir.path());
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            for k in 0..8u8 {
                let (cache, barrier) = (&cache, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    cache.store(key(k), &[k; 64]).unwrap();
                });
            }
        });
        assert_eq!(cache.list().unwrap().len(), 8);
        for k in 0..8u8 {
            assert_eq!(cache.load(key(k)).unwrap().unwrap().unwrap(), [k; 64]);
        }
    }
}

/// The child side of [`concurrent_compiles_of_one_module_all_succeed`],
/// run only by it (ignored, so not counted as a test of its own).
#[test]
#[ignore = "a child process of concurrent_compiles_of_one_module_all_succeed"]
fn concurrent_child() {
    let Some(dir) = std::env::var_os("RADIX_TEST_CACHE_CHILD") else {
        return;
    };
    let (_, _, values) = compile_and_run(program(5.0), &config(Path::new(&dir)));
    assert_eq!(values.len(), 2);
    println!("child compiled");
}

#[test]
fn dumps_hold_the_module_with_locations_and_xla_output() {
    let (cache, dumps) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut config = config(cache.path());
    config.name = "small mlp".into();
    config.dump = Some(DumpConfig::new(dumps.path()));
    let (origin, key, want) = compile_and_run(program(6.0), &config);
    assert_eq!(origin, Origin::Compiled);
    let path = dumps.path().join(format!("small_mlp_{key}.mlir"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("loc(\"crates/radix/tests/cache.rs\":"),
        "{text}"
    );
    // XLA wrote its own dumps next to it.
    let n_files = std::fs::read_dir(dumps.path()).unwrap().count();
    assert!(n_files > 1, "only the module was dumped");
    // With a dump, the program is compiled even when cached (so XLA dumps).
    let (origin, _, _) = compile_and_run(program(6.0), &config);
    assert_eq!(origin, Origin::Compiled);
    // Nor is the dump's executable stored: it would dump (and log) again
    // in every run that loads it.
    assert!(!ExecutableCache::new(cache.path()).path(key).exists());
    config.dump = None;
    assert_eq!(compile_and_run(program(6.0), &config).0, Origin::Compiled);
    assert_eq!(compile_and_run(program(6.0), &config).0, Origin::Cache);
    config.dump = Some(DumpConfig::new(dumps.path()));

    // The dumped text compiles through the plugin and computes the same.
    let platform = platform();
    let exe = platform
        .client()
        .compile(&text, &radix_pjrt::CompileOptions::default())
        .unwrap();
    let x = Buffer::from_literal(&platform, &input()).unwrap();
    let out = exe.execute(&[[x.raw()]], &Default::default()).unwrap();
    let bytes = out[0][0].to_host_vec().unwrap();
    let got = Literal::from_bytes(Shape::new(DType::F32, &[2]), &bytes);
    assert_eq!(got.data(), want);
}

#[test]
fn graph_dumps_add_xla_flags() {
    let dumps = tempfile::tempdir().unwrap();
    let mut config = config(dumps.path());
    config.dump = Some(DumpConfig {
        dir: dumps.path().to_path_buf(),
        xla: XlaDump::HloAndGraphs,
    });
    let flags: Vec<String> = config
        .compile_options()
        .env_overrides
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    for flag in [
        "xla_dump_to",
        "xla_dump_hlo_as_html",
        "xla_dump_hlo_as_dot",
        "xla_dump_fusion_visualization",
    ] {
        assert!(flags.iter().any(|f| f == flag), "{flag} missing: {flags:?}");
    }
    let (origin, _, _) = compile_and_run(program(7.0), &config);
    assert_eq!(origin, Origin::Compiled);
    let names: Vec<String> = std::fs::read_dir(dumps.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n.ends_with(".dot")), "{names:?}");
    assert!(names.iter().any(|n| n.ends_with(".html")), "{names:?}");
}

#[test]
fn user_env_overrides_compile_and_change_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let platform = platform();
    let base = config(dir.path());
    assert!(base.options.env_overrides.is_empty(), "no CPU defaults");
    let mut custom = base.clone();
    custom.options.env_overrides.push((
        "xla_cpu_enable_fast_math".into(),
        OverrideValue::Bool(false),
    ));
    let p = program(8.0);
    let (k1, k2) = (
        radix::cache_key(&platform, &p, &base).unwrap(),
        radix::cache_key(&platform, &p, &custom).unwrap(),
    );
    assert_ne!(k1, k2);
    let (origin, key, _) = compile_and_run(program(8.0), &custom);
    assert_eq!((origin, key), (Origin::Compiled, k2));
    // The dump folder does not change the key.
    let mut dumped = base.clone();
    dumped.dump = Some(DumpConfig::new(dir.path()));
    assert_eq!(radix::cache_key(&platform, &p, &dumped).unwrap(), k1);
}

/// A load marker left by a process that is gone means a load crashed the
/// plugin: the entry is removed and recompiled, not loaded again. A marker
/// of a live process (another load in progress) is no such sign.
#[test]
fn an_entry_whose_load_crashed_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let (_, key, first) = compile_and_run(program(3.0), &config);
    let cache = ExecutableCache::new(dir.path());
    let marker = cache.loading_marker(key);

    // pid 1 always runs (in a container too): a load in progress elsewhere.
    std::fs::write(&marker, "1").unwrap();
    let (origin, _, _) = compile_and_run(program(3.0), &config);
    assert_eq!(origin, Origin::Cache);
    assert!(
        !marker.exists(),
        "the load's own marker is removed after it"
    );

    // No process has this pid: its load never finished.
    std::fs::write(&marker, u32::MAX.to_string()).unwrap();
    let (origin, key2, again) = compile_and_run(program(3.0), &config);
    assert_eq!((origin, key2), (Origin::Compiled, key));
    assert_eq!(first, again);
    assert!(!marker.exists());
    // The recompiled executable is stored again and loads next time.
    assert!(cache.path(key).exists());
    assert_eq!(compile_and_run(program(3.0), &config).0, Origin::Cache);
}

/// Entries are machine code: a cache folder another user could write is
/// neither read nor written (the program compiles as if there were no
/// cache), and a folder the cache creates is private.
#[test]
fn a_folder_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("executables");
    let config = config(&dir);
    let (origin, key, want) = compile_and_run(program(6.0), &config);
    assert_eq!(origin, Origin::Compiled);
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let cache = ExecutableCache::new(&dir);
    assert!(cache.path(key).exists());

    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (origin, _, got) = compile_and_run(program(6.0), &config);
    assert_eq!((origin, &got), (Origin::Compiled, &want));
    let err = cache.load(key).unwrap_err();
    assert!(
        err.to_string()
            .contains("writable by its group or by others"),
        "{err}"
    );
    // Nor is a new entry stored there.
    let (origin, other, _) = compile_and_run(program(7.0), &config);
    assert_eq!(origin, Origin::Compiled);
    assert!(!cache.path(other).exists());
}

/// An entry holding another program's executable (as a colliding key or a
/// copied file would) is checked against the program before use: other
/// parameters, and it is recompiled.
#[test]
fn an_entry_of_another_program_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let (_, key, want) = compile_and_run(program(8.0), &config);
    let other = trace_fn(&[Literal::from_slice(&[1f32; 4], &[4])], |xs| {
        xs[0].exp().sum(0)
    })
    .unwrap();
    let platform = platform();
    let exe = radix::compile_program_with(&platform, other, &config).unwrap();
    let cache = ExecutableCache::new(dir.path());
    let foreign = match cache.load(exe.key()).unwrap() {
        Some(Ok(payload)) => payload,
        _ => panic!("the other program's entry"),
    };
    cache.store(key, &foreign).unwrap();
    let (origin, key2, got) = compile_and_run(program(8.0), &config);
    assert_eq!((origin, key2, &got), (Origin::Compiled, key, &want));
    assert_eq!(compile_and_run(program(8.0), &config).0, Origin::Cache);
}

/// A byte flipped at 50 places of an entry (header and payload), as a disk
/// or a hand edit would: every run, in a child process, recompiles and
/// computes the right values; none crashes. The entry's code is keyed by the
/// folder's secret, so no edit can be made to pass for the original.
#[test]
fn damaged_entries_never_crash_and_are_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let (_, key, want) = compile_and_run(program(9.0), &config);
    let path = ExecutableCache::new(dir.path()).path(key);
    let good = std::fs::read(&path).unwrap();
    let child = || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "damaged_child", "--ignored", "--nocapture"])
            .env("RADIX_TEST_CACHE_CHILD", dir.path())
            .output()
            .unwrap()
    };
    for i in 0..50 {
        let at = i * good.len() / 50 + 7 * i % 13;
        let mut damaged = good.clone();
        damaged[at] ^= 0xff;
        std::fs::write(&path, &damaged).unwrap();
        let out = child();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "byte {at}: {out:?}");
        assert!(stdout.contains("origin Compiled"), "byte {at}: {stdout}");
        assert!(
            stdout.contains(&format!("values {want:?}")),
            "byte {at}: {stdout}"
        );
        // The recompiled entry replaced the damaged one.
        let cache = ExecutableCache::new(dir.path());
        assert!(matches!(cache.load(key), Ok(Some(Ok(_)))), "byte {at}");
    }
}

/// The child side of [`damaged_entries_never_crash_and_are_recompiled`].
#[test]
#[ignore = "a child process of damaged_entries_never_crash_and_are_recompiled"]
fn damaged_child() {
    let dir = std::env::var_os("RADIX_TEST_CACHE_CHILD").expect("run by its parent");
    let (origin, _, values) = compile_and_run(program(9.0), &config(Path::new(&dir)));
    println!("origin {origin:?}");
    println!("values {values:?}");
}

/// Code for one GPU model does not run on another: the devices' kind is
/// part of the key.
#[test]
fn the_device_kind_changes_the_key() {
    let platform = platform();
    let plugin = platform.client().plugin();
    let key = |kinds: &[&str]| CacheKey::new("module", b"options", plugin, kinds).unwrap();
    assert_eq!(key(&["cpu"]), key(&["cpu"]));
    assert_ne!(key(&["NVIDIA H200"]), key(&["NVIDIA H100 80GB HBM3"]));
    assert_ne!(key(&["cpu"]), key(&["NVIDIA H200"]));
}

/// Over its size budget, a store deletes the least recently used entries
/// (a load counts as a use) until the folder fits; the entry just stored
/// stays even when it alone is over, and temporary files are left alone.
#[test]
fn the_least_recently_used_entries_go_over_the_budget() {
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let unlimited = ExecutableCache::new(dir.path()).with_max_bytes(0);
    let key = |i: usize| CacheKey::from_parts(&format!("module {i}"), b"", "sha", (0, 1), "host");
    let payload = vec![7u8; 1000];
    // Five entries, each a minute older than the next.
    let now = SystemTime::now();
    for i in 0..5 {
        let path = unlimited.store(key(i), &payload).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(now - Duration::from_secs(60 * (10 - i as u64)))
            .unwrap();
    }
    // Another process's entry being written: neither counted nor deleted.
    let writing = dir.path().join(format!(".{}.99999.0.tmp", key(9)));
    std::fs::write(&writing, vec![0u8; 100_000]).unwrap();
    // Entry 1, the second oldest, is used: now the newest.
    assert!(matches!(unlimited.load(key(1)), Ok(Some(Ok(_)))));
    let size = unlimited.list().unwrap()[0].size;
    assert_eq!(unlimited.evict(None).unwrap().len(), 0, "0 is unlimited");

    // Room for three entries: storing a sixth removes the three least
    // recently used, 0, 2 and 3.
    let cache = unlimited.clone().with_max_bytes(3 * size + size / 2);
    cache.store(key(5), &payload).unwrap();
    let mut left: Vec<CacheKey> = cache.list().unwrap().iter().map(|e| e.key).collect();
    left.sort_by_key(|k| k.value());
    let mut want = vec![key(1), key(4), key(5)];
    want.sort_by_key(|k| k.value());
    assert_eq!(left, want);
    assert!(writing.exists());
    assert!(dir.path().join(".secret").exists());

    // A budget smaller than one entry keeps only the one just stored.
    let tiny = unlimited.with_max_bytes(1);
    let newest = tiny.store(key(6), &payload).unwrap();
    let left: Vec<_> = tiny.list().unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(left, [newest]);
    assert!(matches!(tiny.load(key(6)), Ok(Some(Ok(_)))));
    // Evicting again (as a second process would) finds nothing to do
    // but the entry it must not keep.
    assert_eq!(tiny.evict(None).unwrap().len(), 1);
    assert!(tiny.evict(None).unwrap().is_empty());
}
