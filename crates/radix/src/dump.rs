//! Dumps of compiled programs: the module text with source locations as
//! `<name>_<key>.mlir`, and XLA's own dumps (`xla_dump_to`) in the same folder.

use std::path::{Path, PathBuf};

use radix_pjrt::OverrideValue;

use crate::cache::CacheKey;

/// Where and what to dump when compiling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpConfig {
    /// The folder (created if missing).
    pub dir: PathBuf,
    /// What XLA adds.
    pub xla: XlaDump,
}

/// What XLA dumps next to the module text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XlaDump {
    /// HLO text of each compilation stage (`xla_dump_to`).
    Hlo,
    /// HLO text, plus HTML and Graphviz graphs and fusion visualizations
    /// (`xla_dump_hlo_as_html`, `xla_dump_hlo_as_dot`,
    /// `xla_dump_fusion_visualization`).
    HloAndGraphs,
}

impl DumpConfig {
    /// A dump into `dir` with XLA's HLO text.
    pub fn new(dir: &Path) -> DumpConfig {
        DumpConfig {
            dir: dir.to_path_buf(),
            xla: XlaDump::Hlo,
        }
    }

    /// The dump named by `RADIX_DUMP_DIR`, if set and not empty.
    pub fn from_env() -> Option<DumpConfig> {
        std::env::var_os("RADIX_DUMP_DIR")
            .filter(|d| !d.is_empty())
            .map(|d| DumpConfig::new(Path::new(&d)))
    }

    /// The XLA debug options this dump sets.
    pub fn env_overrides(&self) -> Vec<(String, OverrideValue)> {
        let mut res = vec![(
            "xla_dump_to".to_string(),
            OverrideValue::String(self.dir.to_string_lossy().into_owned()),
        )];
        if self.xla == XlaDump::HloAndGraphs {
            for flag in [
                "xla_dump_hlo_as_html",
                "xla_dump_hlo_as_dot",
                "xla_dump_fusion_visualization",
            ] {
                res.push((flag.to_string(), OverrideValue::Bool(true)));
            }
        }
        res
    }

    /// The file the module text of `name` with `key` goes to.
    pub fn module_path(&self, name: &str, key: CacheKey) -> PathBuf {
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join(format!("{name}_{key}.mlir"))
    }

    /// Writes `text` (the module with locations) for `name` and `key`.
    pub(crate) fn write_module(
        &self,
        name: &str,
        key: CacheKey,
        text: &str,
    ) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.module_path(name, key);
        std::fs::write(&path, text)?;
        Ok(path)
    }
}
