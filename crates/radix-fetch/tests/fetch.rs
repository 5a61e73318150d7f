//! Fetching pinned wheels into the cache: digest checks, a fresh cache per
//! test (through `RADIX_CACHE_DIR`), and several fetchers at once. Uses the
//! small `six` wheel so the tests cost little network.

use std::sync::Mutex;

use radix_fetch::{
    Error, Machine, Package, WheelTag, fetch_package, fetch_tree, sha256_file, unpack_wheel,
    verify_sha256,
};

const SIX: Package = Package {
    name: "six",
    version: "1.16.0",
    wheel_tag: "py2.py3-none-any",
    wheel_sha256: "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254",
};

// RADIX_CACHE_DIR is process-wide: tests that set it take turns.
static ENV: Mutex<()> = Mutex::new(());

fn with_cache<T>(f: impl FnOnce(&std::path::Path) -> T) -> T {
    let _guard = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: the lock above serialises every test in this file that reads or
    // writes the variable, and no other thread of this binary reads it.
    unsafe { std::env::set_var("RADIX_CACHE_DIR", dir.path()) };
    let res = f(dir.path());
    unsafe { std::env::remove_var("RADIX_CACHE_DIR") };
    res
}

#[test]
fn wrong_sha256_fails_and_leaves_nothing_in_the_cache() {
    with_cache(|cache| {
        let pkg = Package {
            wheel_sha256: "abababababababababababababababababababababababababababababababab",
            ..SIX
        };
        let err = fetch_package(&pkg).unwrap_err();
        assert!(matches!(err, Error::Checksum { .. }), "{err}");
        assert!(err.to_string().contains("six-1.16.0"), "{err}");
        let path = pkg.cache_path().unwrap();
        assert!(!path.exists());
        assert!(path.starts_with(cache));
    });
}

#[test]
fn fetch_unpacks_once_and_concurrent_fetchers_agree() {
    with_cache(|_| {
        let dirs: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3).map(|_| s.spawn(|| fetch_package(&SIX))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        assert!(dirs.iter().all(|d| d == &dirs[0]));
        assert!(dirs[0].join("six.py").is_file());
        let before = std::fs::metadata(dirs[0].join("six.py"))
            .unwrap()
            .modified()
            .unwrap();
        // A second fetch finds the folder and does not download again.
        let again = fetch_package(&SIX).unwrap();
        let after = std::fs::metadata(again.join("six.py"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(before, after);
    });
}

const IDNA: Package = Package {
    name: "idna",
    version: "3.7",
    wheel_tag: "py3-none-any",
    wheel_sha256: "82fee1fc78add43492d3a1898bfa6d8a904cc97d8427f683ed8e798d07761aa0",
};

#[test]
fn a_tree_holds_its_wheels_side_by_side_and_concurrent_fetchers_agree() {
    with_cache(|cache| {
        let dirs: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|_| s.spawn(|| fetch_tree("six-and-idna", &[SIX, IDNA])))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        assert!(dirs.iter().all(|d| d == &dirs[0]));
        assert_eq!(dirs[0], cache.join("packages/six-and-idna"));
        assert!(dirs[0].join("six.py").is_file());
        assert!(dirs[0].join("idna/core.py").is_file());
        // Nothing left behind in the work folder.
        let tmp = cache.join("tmp");
        assert!(std::fs::read_dir(&tmp).map_or(true, |mut d| d.next().is_none()));
    });
}

#[test]
fn a_tree_with_a_wrong_sha256_is_not_made() {
    with_cache(|cache| {
        let bad = Package {
            wheel_sha256: "abababababababababababababababababababababababababababababababab",
            ..IDNA
        };
        let err = fetch_tree("six-and-bad", &[SIX, bad]).unwrap_err();
        assert!(matches!(err, Error::Checksum { .. }), "{err}");
        assert!(!cache.join("packages/six-and-bad").exists());
    });
}

#[test]
fn unknown_package_is_an_error_saying_what_to_do() {
    with_cache(|_| {
        let pkg = Package {
            name: "radix-no-such-package-xyz",
            version: "0.0.0",
            ..SIX
        };
        let err = fetch_package(&pkg).unwrap_err();
        assert!(matches!(err, Error::Download { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("pip download"), "{msg}");
        assert!(msg.contains("radix-no-such-package-xyz==0.0.0"), "{msg}");
    });
}

#[test]
fn wrong_sha256_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.whl");
    std::fs::write(&path, b"not the wheel").unwrap();
    let err = verify_sha256(&path, &"0".repeat(64)).unwrap_err();
    assert!(matches!(err, Error::Checksum { .. }), "{err}");
    assert!(err.to_string().contains("x.whl"), "{err}");
    let good = sha256_file(&path).unwrap();
    verify_sha256(&path, &good).unwrap();
}

/// A model wheel that is not a zip archive is a wheel error naming the file
/// (it used to surface as a PJRT plugin-load error).
#[test]
fn unpacking_a_corrupt_wheel_is_a_wheel_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.whl");
    std::fs::write(&path, b"PK\x03\x04 truncated").unwrap();
    let err = unpack_wheel(&path, &dir.path().join("out")).unwrap_err();
    assert!(
        matches!(&err, Error::Wheel { path: p, .. } if p == &path),
        "{err}"
    );
    assert!(err.to_string().contains("broken.whl"), "{err}");
}

/// `python3 -m pip` puts the working directory first on `sys.path`: a
/// `./pip/` of the caller's must not run in pip's place.
#[test]
fn a_pip_folder_in_the_working_directory_is_not_run() {
    with_cache(|cache| {
        let here = tempfile::tempdir().unwrap();
        let planted = here.path().join("pip");
        std::fs::create_dir(&planted).unwrap();
        let marker = here.path().join("planted-pip-ran");
        let code = format!(
            "open({:?}, 'w').write('ran')\nraise SystemExit(1)\n",
            marker
        );
        std::fs::write(planted.join("__init__.py"), "").unwrap();
        std::fs::write(planted.join("__main__.py"), code).unwrap();
        let before = std::env::current_dir().unwrap();
        // The working directory is process-wide like RADIX_CACHE_DIR: the
        // lock `with_cache` holds serialises this too.
        std::env::set_current_dir(here.path()).unwrap();
        let res = fetch_package(&SIX);
        std::env::set_current_dir(before).unwrap();
        let dir = res.unwrap();
        assert!(dir.starts_with(cache) && dir.join("six.py").is_file());
        assert!(!marker.exists(), "the planted pip ran");
    });
}

/// A wheel pinned for another platform is refused before pip runs (nothing
/// is downloaded, nothing written), naming this machine and the platform
/// the pin is for.
#[test]
fn a_wheel_for_another_platform_is_refused_naming_both() {
    with_cache(|cache| {
        let pkg = Package {
            wheel_tag: "py3-none-macosx_11_0_arm64",
            ..SIX
        };
        let err = fetch_package(&pkg).unwrap_err();
        assert!(matches!(err, Error::NoWheelForPlatform { .. }), "{err}");
        let msg = err.to_string();
        let machine = Machine::this().to_string();
        assert!(
            msg.contains(&format!("six==1.16.0 for this machine, {machine}"))
                && msg.contains("the pinned wheel is for macosx_11_0_arm64 only"),
            "{msg}"
        );
        assert_eq!(std::fs::read_dir(cache).unwrap().count(), 0, "{msg}");
    });
}

/// Which machines a tag fits: any machine for `any`; an x86-64 Linux wheel
/// neither on aarch64 nor with a glibc older than the tag's.
#[test]
fn wheel_tags_fit_the_machines_they_name() {
    let linux = |arch, glibc| Machine {
        os: "linux",
        arch,
        glibc,
    };
    let x86 = linux("x86_64", Some((2, 35)));
    let arm = linux("aarch64", Some((2, 39)));
    let old = linux("x86_64", Some((2, 17)));
    let musl = linux("x86_64", None);
    let mac = Machine {
        os: "macos",
        arch: "aarch64",
        glibc: None,
    };
    let fits = |tag: &str, m: &Machine| WheelTag::parse(tag).unwrap().fits(m);
    for m in [&x86, &arm, &old, &musl, &mac] {
        assert!(fits("py3-none-any", m), "{m}");
    }
    let plugin = "py3-none-manylinux_2_27_x86_64";
    assert!(fits(plugin, &x86));
    for m in [&arm, &old, &musl, &mac] {
        assert!(!fits(plugin, m), "{m}");
    }
    assert!(fits("cp311-cp311-manylinux2014_x86_64", &old));
    assert!(fits("py3-none-musllinux_1_2_x86_64", &musl));
    assert!(!fits("py3-none-musllinux_1_2_x86_64", &x86));
    assert!(fits("py3-none-macosx_11_0_arm64", &mac));
    assert!(fits("py3-none-macosx_10_9_universal2", &mac));

    let pkg = Package {
        wheel_tag: plugin,
        ..SIX
    };
    let err = pkg.check_platform(&arm).unwrap_err().to_string();
    assert_eq!(
        err,
        "cannot fetch six==1.16.0 for this machine, linux aarch64 (glibc 2.39): \
         the pinned wheel is for manylinux_2_27_x86_64 only"
    );
    assert!(pkg.check_platform(&x86).is_ok());
}

/// pip is told the tag's implementation, Python version (only when the
/// tag names a minor one), ABI and platforms, and takes binary wheels only.
#[test]
fn pip_is_told_the_pinned_wheels_tag() {
    let args = |tag: &str| WheelTag::parse(tag).unwrap().pip_args().join(" ");
    assert_eq!(
        args("py3-none-manylinux_2_27_x86_64"),
        "--only-binary=:all: --implementation py --abi none --platform manylinux_2_27_x86_64"
    );
    assert_eq!(
        args("py2.py3-none-any"),
        "--only-binary=:all: --implementation py --abi none --platform any"
    );
    assert_eq!(
        args("cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64"),
        "--only-binary=:all: --implementation cp --python-version 311 --abi cp311 \
         --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
    );
    for bad in [
        "py3-none",
        "py3-none-any-x",
        "py3--any",
        "java8-none-any",
        "py3-none-a b",
    ] {
        assert!(
            matches!(WheelTag::parse(bad), Err(Error::Tag { .. })),
            "{bad}"
        );
    }
}

/// A wheel pip fetched under another tag than the pinned one is refused
/// by its name, before its digest is taken: `six` has only a
/// `py2.py3-none-any` wheel, pinned here as `py3-none-any`.
#[test]
fn a_wheel_of_another_tag_is_refused_by_its_name() {
    with_cache(|cache| {
        let pkg = Package {
            wheel_tag: "py3-none-any",
            ..SIX
        };
        let err = fetch_package(&pkg).unwrap_err();
        assert!(matches!(err, Error::Download { .. }), "{err}");
        assert!(
            err.to_string().contains(
                "pip fetched six-1.16.0-py2.py3-none-any.whl, not the pinned py3-none-any wheel"
            ),
            "{err}"
        );
        assert!(!pkg.cache_path().unwrap().exists());
        assert!(pkg.cache_path().unwrap().starts_with(cache));
    });
}
