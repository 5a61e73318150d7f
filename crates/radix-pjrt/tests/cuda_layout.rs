//! The CUDA plugin's layout, checked where there is no GPU, so that the
//! first run on one fails for nothing but a missing device: the pinned
//! plugin and the NVIDIA wheels it runs on (`provision::CUDA13_LIBRARIES`)
//! fetched into one folder of the cache, as the plugin's run-time search
//! path expects (`nvidia/{cu13,cudnn,nccl}/lib` beside `jax_plugins/`);
//! every library it opens — those its Python package opens first, and
//! cuDNN's parts — resolves there or in the system, the driver
//! (`libcuda.so.1`) alone missing; `ptxas` and `libdevice` are where
//! `xla_gpu_cuda_data_dir` points; and the plugin loads and fails, if it
//! does, for want of a GPU.
//!
//! The first run fetches about 2.3 GB of wheels.

use std::path::{Path, PathBuf};
use std::process::Command;

use radix_pjrt::provision::{self, Target};
use radix_pjrt::{Client, ClientOptions, Plugin};

/// The fetched plugin file and the folder holding it and its libraries.
fn fetched() -> (PathBuf, PathBuf) {
    let plugin = provision::install(Target::Cuda).expect("fetch the CUDA plugin and its libraries");
    let root = provision::spec(Target::Cuda)
        .root_of(&plugin)
        .expect("the plugin's folder")
        .to_path_buf();
    (plugin, root)
}

/// The libraries `ldd` finds for `lib` nowhere, the driver left out.
fn unresolved(lib: &Path) -> Vec<String> {
    // `ldd` runs the library's loader; a deadline keeps a broken one from
    // hanging the test.
    let out = Command::new("timeout")
        .args(["60", "ldd"])
        .arg(lib)
        .output()
        .expect("run ldd");
    assert!(out.status.success(), "ldd {}: {:?}", lib.display(), out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("not found") && !l.trim_start().starts_with("libcuda.so.1"))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn every_library_the_cuda_plugin_opens_resolves_in_the_fetched_folder() {
    let (plugin, root) = fetched();
    let spec = provision::spec(Target::Cuda);
    let mut libs: Vec<PathBuf> = spec.preload.iter().map(|p| root.join(p)).collect();
    // libcudnn.so.9 opens its parts by name at run time, from its folder.
    let cudnn = root.join("nvidia/cudnn/lib");
    let parts = std::fs::read_dir(&cudnn).expect("cuDNN's folder");
    libs.extend(parts.filter_map(|e| e.ok().map(|e| e.path())));
    libs.push(plugin.clone());
    let mut missing = vec![];
    for lib in &libs {
        assert!(
            lib.is_file(),
            "{} is not in the fetched folder",
            lib.display()
        );
        for name in unresolved(lib) {
            missing.push(format!("{}: {name}", lib.display()));
        }
    }
    assert!(missing.is_empty(), "unresolved:\n{}", missing.join("\n"));
    assert!(libs.len() > spec.preload.len() + 5, "{libs:?}");

    let data = spec
        .cuda_data_dir(&plugin)
        .expect("the CUDA folder with ptxas");
    assert!(data.join("bin/ptxas").is_file());
    assert!(data.join("nvvm/libdevice/libdevice.10.bc").is_file());
}

#[test]
fn the_cuda_plugin_loads_and_wants_nothing_but_a_device() {
    let (plugin, _) = fetched();
    provision::spec(Target::Cuda)
        .preload(&plugin)
        .expect("open the plugin's libraries");
    let loaded = Plugin::load(&plugin).expect("load the CUDA plugin");
    let (major, minor) = loaded.api_version();
    assert!(major > 0 || minor > 0, "PJRT API {major}.{minor}");
    match Client::new(loaded, &ClientOptions::default()) {
        // A machine with a GPU and its driver.
        Ok(client) => assert!(!client.addressable_devices().is_empty()),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("GPU") || msg.contains("device"),
                "the CUDA client failed for another reason than a missing device: {msg}"
            );
            assert!(
                !msg.contains("cannot open shared object") && !msg.contains(".so"),
                "a library is missing: {msg}"
            );
        }
    }
}
