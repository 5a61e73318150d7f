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
    /// Wheels of the libraries the plugin opens at run time, unpacked into
    /// one folder with the plugin's own (the folders its run-time search
    /// path names: `nvidia/cu13/lib` beside `jax_plugins/` for CUDA).
    pub libraries: &'static [Package],
    /// The libraries to open before the plugin, by their path in that
    /// folder, as the plugin's Python package does when JAX loads it: the
    /// plugin then finds them by name, whichever folder they are in.
    pub preload: &'static [&'static str],
}

/// The NVIDIA wheels the CUDA 13 plugin runs on, as
/// `jax-cuda13-plugin[with-cuda]` asks for them (the newest of each on
/// PyPI when pinned): CUDA runtime, cuBLAS, cuFFT, cuSOLVER, cuSPARSE,
/// CUPTI, NVRTC, nvJitLink, NVVM and `ptxas` (nvcc), cuDNN, NCCL, NVSHMEM.
pub const CUDA13_LIBRARIES: [Package; 13] = [
    nvidia(
        "nvidia-cuda-runtime",
        "13.5.37",
        "py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64",
        "df2b79a8852f10d1fef8c848489c49eebb5754051bf870202a862831412b179d",
    ),
    nvidia(
        "nvidia-cublas",
        "13.10.0.20",
        "py3-none-manylinux1_x86_64.manylinux_2_5_x86_64",
        "dcc6d63884c53d07e267ce7e6feac17b2538cebaafec5db865736c3e28e4dc84",
    ),
    nvidia(
        "nvidia-cufft",
        "12.5.0.14",
        "py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64",
        "b8be26837a5abad2b5b74f3e92dd29f622a42934b355be0961a48712cbba23ad",
    ),
    nvidia(
        "nvidia-cusolver",
        "12.4.1.2",
        "py3-none-manylinux_2_27_x86_64",
        "b3b8e02fd2f2df869369af075dc3a179d43f6f7b85e94632a7dce556697be044",
    ),
    nvidia(
        "nvidia-cusparse",
        "12.9.4.2",
        "py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64",
        "072667e58c851a318738f5527a12eb225cbf058803f2ea451c722d8cf8edddec",
    ),
    nvidia(
        "nvidia-cuda-cupti",
        "13.5.25",
        "py3-none-manylinux_2_25_x86_64",
        "9dcca41c12a734192b14e7128ae116bc9ce1b9da686e2ebf48ae7a4415f76650",
    ),
    nvidia(
        "nvidia-cuda-nvrtc",
        "13.5.37",
        "py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64",
        "86b4d68058807988b7d9af5b44917a0601e9c337f35ccd657bfb3c759ff8d8bc",
    ),
    nvidia(
        "nvidia-nvjitlink",
        "13.5.37",
        "py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64",
        "280d7cb9649704145f074b8dbde500de04ce02d0872e066e20a83c17bcaa93eb",
    ),
    nvidia(
        "nvidia-nvvm",
        "13.5.37",
        "py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64",
        "c41bfa362e407405163f103c2229f0765f8cc2ed7d148b754dc77f228bf7e070",
    ),
    nvidia(
        "nvidia-cuda-nvcc",
        "13.5.37",
        "py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64",
        "f5c4f7ead5d964fb4af42bbf1e6d3ec3c1e6e9d83b53749f691d387e7fcaa3a7",
    ),
    nvidia(
        "nvidia-cudnn-cu13",
        "9.28.1.4",
        "py3-none-manylinux_2_27_x86_64",
        "a54f205b1db1f2895d99f398754db1369816f0569dd459731f925635cf7b65ec",
    ),
    nvidia(
        "nvidia-nccl-cu13",
        "2.32.6",
        "py3-none-manylinux_2_27_x86_64",
        "76e7aad00482092baf01e13e66f441d54c96b5cf1e3f143dee27db7f731d41ba",
    ),
    nvidia(
        "nvidia-nvshmem-cu13",
        "3.8.0",
        "py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64",
        "81a4d1f666543e6d34df6d2ff940c7da1435e34e186aab6f3c2b48861b64ef38",
    ),
];

/// The libraries `jax_plugins/xla_cuda13/__init__.py` opens before the
/// plugin, in its order.
pub const CUDA13_PRELOAD: [&str; 12] = [
    "nvidia/cu13/lib/libcudart.so.13",
    "nvidia/cu13/lib/libnvrtc.so.13",
    "nvidia/cu13/lib/libcublas.so.13",
    "nvidia/cu13/lib/libcublasLt.so.13",
    "nvidia/nccl/lib/libnccl.so.2",
    "nvidia/cu13/lib/libcupti.so.13",
    "nvidia/cu13/lib/libcusparse.so.12",
    "nvidia/cu13/lib/libcusolver.so.12",
    "nvidia/cu13/lib/libcufft.so.12",
    "nvidia/nvshmem/lib/libnvshmem_host.so.3",
    "nvidia/cudnn/lib/libcudnn.so.9",
    "nvidia/cu13/lib/libnvJitLink.so.13",
];

const fn nvidia(
    name: &'static str,
    version: &'static str,
    wheel_tag: &'static str,
    wheel_sha256: &'static str,
) -> Package {
    Package {
        name,
        version,
        wheel_tag,
        wheel_sha256,
    }
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
        libraries: &[],
        preload: &[],
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
        libraries: &CUDA13_LIBRARIES,
        preload: &CUDA13_PRELOAD,
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
        libraries: &[],
        preload: &[],
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
        libraries: &[],
        preload: &[],
    },
];

impl PluginSpec {
    /// The name of the cache folder holding the plugin with its libraries.
    fn tree_name(&self) -> String {
        format!(
            "{}-{}-with-libraries",
            self.package.name, self.package.version
        )
    }

    /// The cache folder the plugin is unpacked into (with its libraries,
    /// if it has any).
    pub fn cache_path(&self) -> radix_fetch::Result<PathBuf> {
        if self.libraries.is_empty() {
            self.package.cache_path()
        } else {
            Ok(radix_fetch::cache_dir()?
                .join("packages")
                .join(self.tree_name()))
        }
    }

    /// The folder the plugin file `plugin` was unpacked into: its
    /// [`PluginSpec::file`] path taken off (`site-packages` for an
    /// installed Python package, a [`PluginSpec::cache_path`] for a fetched
    /// one), where its libraries' wheels unpack beside it.
    pub fn root_of<'a>(&self, plugin: &'a Path) -> Option<&'a Path> {
        plugin
            .ancestors()
            .nth(Path::new(self.file).components().count())
    }

    /// Opens this plugin's [`PluginSpec::preload`] libraries found in the
    /// folder of the plugin file `plugin` (one [`PluginSpec::cache_path`]
    /// holds), for good: a plugin elsewhere finds its libraries its own
    /// way. An `Err` names a library that is there but does not load.
    pub fn preload(&self, plugin: &Path) -> Result<()> {
        let Some(root) = self.root_of(plugin) else {
            return Ok(());
        };
        for rel in self.preload {
            let path = root.join(rel);
            if !path.is_file() {
                continue;
            }
            // SAFETY: a library of the pinned wheels, opened as the
            // plugin's own Python package opens it; its initializers are
            // NVIDIA's.
            let lib =
                unsafe { libloading::Library::new(&path) }.map_err(|e| Error::PluginLoad {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            // Kept open for the process's life: the plugin resolves it by
            // name from then on.
            std::mem::forget(lib);
        }
        Ok(())
    }

    /// XLA's `xla_gpu_cuda_data_dir` for this plugin file: the CUDA folder
    /// (`ptxas` in `bin`, `libdevice` in `nvvm`) of its libraries' wheels,
    /// where the plugin's folder holds them.
    pub fn cuda_data_dir(&self, plugin: &Path) -> Option<PathBuf> {
        let dir = self.root_of(plugin)?.join("nvidia/cu13");
        dir.join("bin/ptxas").is_file().then_some(dir)
    }
}

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
    let folder = spec.cache_path().map_err(|e| fetch_error(target, e))?;
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
    let dir = if spec.libraries.is_empty() {
        radix_fetch::fetch_package(&spec.package)
    } else {
        let wheels = [&[spec.package][..], spec.libraries].concat();
        radix_fetch::fetch_tree(&spec.tree_name(), &wheels)
    };
    let dir = dir.map_err(|e| fetch_error(target, e))?;
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
