//! How to compile: XLA compile options with per-platform defaults, the
//! executable cache, dumps.

use std::path::PathBuf;

use radix_pjrt::provision::Target;
use radix_pjrt::{CompileOptions, OverrideValue};

use crate::Platform;
use crate::cache::ExecutableCache;
use crate::custom_call::CustomCallMode;
use crate::dump::DumpConfig;
use crate::sharding::Partitioner;

/// Everything [`crate::compile_program_with`] needs besides the program.
///
/// Start from [`CompileConfig::new`] (the platform's defaults and the
/// environment) and change fields:
///
/// ```no_run
/// # fn main() -> radix::Result<()> {
/// use radix::{CacheMode, CompileConfig, DumpConfig, Platform};
/// let platform = Platform::cpu()?;
/// let mut config = CompileConfig::new(&platform);
/// config.name = "mlp".into();
/// config.cache = CacheMode::Disabled;
/// config.dump = Some(DumpConfig::new(std::path::Path::new("/tmp/radix-dump")));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CompileConfig {
    /// The program's name in dump file names.
    pub name: String,
    /// XLA compile options. Their `env_overrides` start with the platform's
    /// defaults ([`platform_env_overrides`]); replace or extend them.
    pub options: CompileOptions,
    /// Where compiled executables are cached.
    pub cache: CacheMode,
    /// Where to dump the module and XLA's passes, if anywhere.
    pub dump: Option<DumpConfig>,
    /// Which implementation of custom calls to compile.
    pub custom_calls: CustomCallMode,
    /// Which partitioner splits a program over the platform's mesh:
    /// Shardy by default, as JAX and ZML; GSPMD (`mhlo.sharding`) on
    /// request.
    pub partitioner: Partitioner,
}

/// Whether and where compiled executables are cached on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheMode {
    /// Always compile; store nothing.
    Disabled,
    /// Load from and store into this folder.
    Dir(PathBuf),
}

impl CompileConfig {
    /// The defaults for `platform`: its [`platform_env_overrides`], one
    /// replica, one partition (or, on a platform with a mesh, one SPMD
    /// partition per mesh device with the platform's devices assigned in
    /// order), the cache in [`ExecutableCache::default_dir`]
    /// (under `$RADIX_CACHE_DIR` when set), and a dump when `RADIX_DUMP_DIR`
    /// is set.
    pub fn new(platform: &Platform) -> CompileConfig {
        let mut options = CompileOptions {
            env_overrides: platform_env_overrides(platform.target()),
            ..CompileOptions::default()
        };
        // The CUDA plugin's compiler looks for `ptxas` and `libdevice` in
        // the CUDA folder its fetched libraries came with.
        let spec = radix_pjrt::provision::spec(platform.target());
        if let Some(dir) = spec.cuda_data_dir(platform.client().plugin().path()) {
            let dir = OverrideValue::String(dir.display().to_string());
            options
                .env_overrides
                .push(("xla_gpu_cuda_data_dir".into(), dir));
        }
        if let Some(mesh) = platform.mesh() {
            options.num_partitions = mesh.n_devices();
            options.spmd = true;
            options.device_assignment =
                Some(platform.devices().iter().map(|d| d.id() as i64).collect());
        }
        CompileConfig {
            name: "main".into(),
            options,
            cache: match ExecutableCache::default_dir() {
                Some(dir) => CacheMode::Dir(dir),
                None => {
                    tracing::warn!(
                        "no cache folder (set RADIX_CACHE_DIR or HOME): compiling every program"
                    );
                    CacheMode::Disabled
                }
            },
            dump: DumpConfig::from_env(),
            custom_calls: CustomCallMode::Native,
            partitioner: Partitioner::default(),
        }
    }

    /// [`CompileConfig::options`] with the Shardy partitioner on where it
    /// partitions the program (SPMD) with [`Partitioner::Shardy`]: what
    /// the executable cache's key hashes.
    pub fn partitioned_options(&self) -> CompileOptions {
        let mut options = self.options.clone();
        options.use_shardy = options.spmd && self.partitioner == Partitioner::Shardy;
        options
    }

    /// The options XLA compiles with: [`CompileConfig::partitioned_options`]
    /// plus the dump's flags (where the options do not already set them).
    pub fn compile_options(&self) -> CompileOptions {
        let mut options = self.partitioned_options();
        if let Some(dump) = &self.dump {
            for (name, value) in dump.env_overrides() {
                if !options.env_overrides.iter().any(|(n, _)| *n == name) {
                    options.env_overrides.push((name, value));
                }
            }
        }
        options
    }
}

/// The XLA debug options radix sets by default on `target`: on CUDA and
/// ROCm, `xla_gpu_enable_triton_gemm = false` (as ZML does: cuBLAS/rocBLAS
/// gemms are more predictable).
pub fn platform_env_overrides(target: Target) -> Vec<(String, OverrideValue)> {
    match target {
        Target::Cuda | Target::Rocm => vec![(
            "xla_gpu_enable_triton_gemm".into(),
            OverrideValue::Bool(false),
        )],
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_targets_turn_triton_gemm_off() {
        for target in [Target::Cuda, Target::Rocm] {
            assert_eq!(
                platform_env_overrides(target),
                vec![(
                    "xla_gpu_enable_triton_gemm".to_string(),
                    OverrideValue::Bool(false)
                )]
            );
        }
        assert!(platform_env_overrides(Target::Cpu).is_empty());
    }
}
