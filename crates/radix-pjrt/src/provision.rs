//! Finding a PJRT plugin on this machine, or fetching the pinned one.
//!
//! Each target's plugin is pinned as a PyPI wheel ([`PLUGINS`]); fetching it
//! into the radix cache is `radix-fetch`'s job (pip download, sha256 check,
//! file lock, unpack), whose [`Package`] and [`cache_dir`] are re-exported
//! here. This module knows where plugins live and in which order to look.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub use radix_fetch::{Package, cache_dir, check_private, private_dir};

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

    /// Whether this machine has the device files the target's driver makes
    /// (`/dev/nvidiactl`, `/dev/kfd`, `/dev/accel*` or `/dev/vfio/*`).
    /// Without them no plugin of the target can see a device, so automatic
    /// selection skips the target without looking for its plugin (which
    /// would start Python to list its package folders).
    pub fn has_device_files(self) -> bool {
        let any_in = |dir: &str, prefix: &str| {
            std::fs::read_dir(dir).is_ok_and(|entries| {
                entries.flatten().any(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.starts_with(prefix) && name != "vfio"
                })
            })
        };
        match self {
            Target::Cpu => true,
            Target::Cuda => Path::new("/dev/nvidiactl").exists(),
            Target::Rocm => Path::new("/dev/kfd").exists(),
            Target::Tpu => any_in("/dev", "accel") || any_in("/dev/vfio", ""),
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
    /// The sha256 of that file in the pinned wheel: a plugin found in an
    /// installed Python package is loaded only if it has this one.
    pub file_sha256: &'static str,
}

/// The pinned plugins, one per target.
pub const PLUGINS: [PluginSpec; 4] = [
    PluginSpec {
        target: Target::Cpu,
        package: Package {
            name: "lammps-jax-pjrt-cpu",
            version: "0.11.2",
            wheel_tag: "py3-none-manylinux_2_27_x86_64",
            wheel_sha256: "1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1",
        },
        file: "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
        file_sha256: "ad1309ac822b1b24d51b7f9947c7c9fa9ef5d67f390584cbc3d1fa2428fed9c2",
    },
    PluginSpec {
        target: Target::Cuda,
        package: Package {
            name: "jax-cuda13-pjrt",
            version: "0.12.0.1",
            wheel_tag: "py3-none-manylinux_2_27_x86_64",
            wheel_sha256: "5899bb6177eda86ea532afb9a26794f2bdd04966f6a01f9028266b16c2b6cf90",
        },
        file: "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
        file_sha256: "b6de513893c09af2c77e71afcef46d9706f8c259337cdef4cd5cae2353886f75",
    },
    PluginSpec {
        target: Target::Rocm,
        package: Package {
            name: "jax-rocm7-pjrt",
            version: "0.12.0",
            wheel_tag: "py3-none-manylinux_2_27_x86_64",
            wheel_sha256: "4551d0714523355f2946ca1958c3f584e95661e467a641d36b726f718a1c7934",
        },
        file: "jax_plugins/xla_rocm7/xla_rocm_plugin.so",
        file_sha256: "6e7239347f37f1a5a17c2a2d9301411f9f17e30e0707a717f4717556fa402511",
    },
    PluginSpec {
        target: Target::Tpu,
        package: Package {
            name: "libtpu",
            version: "0.0.51",
            wheel_tag: "cp311-cp311-manylinux_2_31_x86_64",
            wheel_sha256: "ba67ddbfdbac61c8da1fafc26cd51b93e9fe4d298016e2882eb986b1718cba34",
        },
        file: "libtpu/libtpu.so",
        file_sha256: "ad0b2a3bc5d4de96f653b3701aaed8769a691776ca0e14c791dcdca785d43e42",
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

/// The plugin file for `target`, fetching it if it is nowhere on this machine.
///
/// Look-up order: `explicit`, `RADIX_PJRT_PLUGIN`, the radix cache, installed
/// Python packages (only a file with the pinned sha256), and last a fetch of
/// the pinned wheel. An explicit or `RADIX_PJRT_PLUGIN` path is the user's
/// choice and is not checked against the pin.
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
    let folder = spec
        .package
        .cache_path()
        .map_err(|e| fetch_error(target, e))?;
    let cached = folder.join(spec.file);
    if cached.is_file() {
        // A plugin is code: its folders must be the user's alone (see
        // `radix_fetch::check_private`).
        let packages = folder.parent().unwrap_or(&folder);
        for dir in [packages.parent().unwrap_or(packages), packages, &folder] {
            radix_fetch::check_private(dir).map_err(|e| fetch_error(target, e))?;
        }
        return Ok(Some((cached, Source::Cache)));
    }
    Ok(
        in_python_packages(spec, python_paths(), crate::file_hash::sha256)
            .map(|path| (path, Source::Python)),
    )
}

/// The first of `spec`'s plugin files below the Python package folders
/// `dirs` whose sha256 (by `sha256`) is the pinned one. A Python package
/// folder is anyone's to install into, so a plugin there that is not the
/// pinned build (another version, or a changed file) is skipped, logged,
/// and the search goes on.
fn in_python_packages(
    spec: &PluginSpec,
    dirs: &[PathBuf],
    sha256: impl Fn(&Path) -> Result<String>,
) -> Option<PathBuf> {
    for dir in dirs {
        let path = dir.join(spec.file);
        if !path.is_file() {
            continue;
        }
        match sha256(&path) {
            Ok(got) if got == spec.file_sha256 => return Some(path),
            Ok(got) => tracing::info!(
                "skipping the {} plugin {}: its sha256 is {got}, the pinned one {}",
                spec.target,
                path.display(),
                spec.file_sha256
            ),
            Err(e) => tracing::info!(
                "skipping the {} plugin {}: {e}; the pinned one has sha256 {}",
                spec.target,
                path.display(),
                spec.file_sha256
            ),
        }
    }
    None
}

/// Fetches the pinned plugin of `target` into the cache (if it is not there
/// yet, through [`radix_fetch::fetch_package`]) and returns its path.
pub fn install(target: Target) -> Result<PathBuf> {
    let spec = spec(target);
    let dir = radix_fetch::fetch_package(&spec.package).map_err(|e| fetch_error(target, e))?;
    let path = dir.join(spec.file);
    if !path.is_file() {
        return Err(Error::Provision {
            target: target.to_string(),
            reason: format!("{} has no {}", dir.display(), spec.file),
        });
    }
    Ok(path)
}

/// A failed fetch of `target`'s plugin wheel as this crate's error: pip's
/// failure is a [`Error::Provision`] of the target (saying how to do without
/// a fetch), a wheel that does not unpack is a [`Error::PluginLoad`].
fn fetch_error(target: Target, e: radix_fetch::Error) -> Error {
    match e {
        radix_fetch::Error::Download { reason, .. } => Error::Provision {
            target: target.to_string(),
            reason: format!("{reason}, or point RADIX_PJRT_PLUGIN at a plugin file"),
        },
        radix_fetch::Error::Checksum {
            path,
            expected,
            got,
        } => Error::Checksum {
            path,
            expected,
            got,
        },
        radix_fetch::Error::Wheel { path, reason } => Error::PluginLoad { path, reason },
        radix_fetch::Error::Io { path, source } => Error::Io { path, source },
        radix_fetch::Error::NoWheelForPlatform { .. } => Error::Provision {
            target: target.to_string(),
            reason: format!("{e}; point RADIX_PJRT_PLUGIN at a plugin file built for it"),
        },
        e @ (radix_fetch::Error::Untrusted { .. }
        | radix_fetch::Error::NoCacheDir
        | radix_fetch::Error::Tag { .. }) => Error::Provision {
            target: target.to_string(),
            reason: e.to_string(),
        },
    }
}

/// The folders on Python's `sys.path`, where installed packages live. Empty
/// when there is no `python3`. Asked once per process: starting Python
/// takes a good part of a second on some machines.
fn python_paths() -> &'static [PathBuf] {
    static PATHS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    PATHS.get_or_init(ask_python_paths)
}

fn ask_python_paths() -> Vec<PathBuf> {
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
    fn python_package_plugins_load_only_when_pinned() {
        use sha2::Digest;
        let hash = |path: &Path| -> Result<String> {
            let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
            Ok(hex::encode(sha2::Sha256::digest(bytes)))
        };
        let tmp = tempfile::tempdir().unwrap();
        let site = |name: &str, bytes: &[u8]| {
            let dir = tmp.path().join(name);
            let file = dir.join(spec(Target::Cpu).file);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, bytes).unwrap();
            (dir, file)
        };
        let (other, _) = site("other-site-packages", b"another build");
        let (pinned, pinned_file) = site("site-packages", b"the pinned build");
        let empty = tmp.path().join("empty");
        let mut cpu = *spec(Target::Cpu);
        cpu.file_sha256 = Box::leak(hash(&pinned_file).unwrap().into_boxed_str());
        // The unpinned build comes first on the path: skipped.
        let dirs = [empty.clone(), other.clone(), pinned.clone()];
        assert_eq!(in_python_packages(&cpu, &dirs, hash), Some(pinned_file));
        // Only unpinned builds: none, so the caller fetches.
        assert_eq!(in_python_packages(&cpu, &[empty, other], hash), None);
        // The real pin is no fake file's hash.
        assert_eq!(in_python_packages(spec(Target::Cpu), &dirs, hash), None);
    }

    /// A fetched plugin (sha256-checked wheel) has its file's pin.
    #[test]
    fn fetched_plugins_have_their_pins() {
        for p in PLUGINS {
            let Ok(folder) = p.package.cache_path() else {
                continue;
            };
            let file = folder.join(p.file);
            if file.is_file() {
                let got = crate::file_hash::sha256(&file).unwrap();
                assert_eq!(got, p.file_sha256, "{}", file.display());
            }
        }
    }

    #[test]
    fn pins_are_sha256_hex() {
        for p in PLUGINS {
            for pin in [p.file_sha256, p.package.wheel_sha256] {
                assert!(pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit()));
            }
        }
    }

    #[test]
    fn explicit_path_that_is_not_a_file_is_an_error() {
        let err = find(Target::Cpu, Some(Path::new("/nonexistent/plugin.so"))).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/plugin.so"), "{err}");
    }

    #[test]
    fn a_failed_plugin_fetch_names_the_target_and_the_way_around_it() {
        let download = radix_fetch::Error::Download {
            requirement: "x==1".into(),
            reason: "pip failed".into(),
        };
        let err = fetch_error(Target::Cuda, download);
        assert!(
            matches!(&err, Error::Provision { target, .. } if target == "cuda"),
            "{err}"
        );
        assert!(err.to_string().contains("RADIX_PJRT_PLUGIN"), "{err}");
        let wheel = radix_fetch::Error::Wheel {
            path: "/c/x.whl".into(),
            reason: "not a zip".into(),
        };
        let err = fetch_error(Target::Cpu, wheel);
        assert!(
            matches!(&err, Error::PluginLoad { path, .. } if path == Path::new("/c/x.whl")),
            "{err}"
        );
    }
}
