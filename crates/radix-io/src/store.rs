//! Looking weights up by name across files, with a name-mapping hook.

use std::path::Path;

use crate::DType;
use crate::{Error, Gguf, HostTensor, Result, Safetensors};
use radix_quant::Format;

/// A file of named tensors: [`Safetensors`] and [`Gguf`] are sources.
pub trait TensorSource: Send + Sync {
    /// The file the source was opened from.
    fn path(&self) -> &Path;
    /// The file holding tensor `name` (a shard of a sharded checkpoint); the
    /// source's own path by default.
    fn file_of(&self, name: &str) -> &Path {
        let _ = name;
        self.path()
    }
    /// The stored tensor names, sorted.
    fn names(&self) -> Vec<String>;
    /// The row-major dims tensor `name` will have when read, if present.
    fn dims(&self, name: &str) -> Option<Vec<i64>>;
    /// Tensor `name`, or `None` if absent; `Err` if present but unreadable.
    fn tensor(&self, name: &str) -> Result<Option<HostTensor>>;
    /// The format tensor `name` is stored in, if present and one radix can
    /// keep as blocks (a float tensor is F32, F16 or BF16 "blocks" of one).
    fn format(&self, name: &str) -> Option<Format> {
        let t = self.tensor(name).ok()??;
        float_format(t.dtype())
    }
    /// Tensor `name` as stored, or `None` if absent: its format and its rows
    /// of blocks as `u8` (the last dim counts the bytes of a row), without
    /// conversion. `Err` if present but in no format radix keeps as blocks.
    fn blocks(&self, name: &str) -> Result<Option<(Format, HostTensor)>> {
        let Some(t) = self.tensor(name)? else {
            return Ok(None);
        };
        let Some(format) = float_format(t.dtype()) else {
            return Err(Error::UnsupportedType {
                path: self.file_of(name).to_path_buf(),
                tensor: name.to_string(),
                ty: t.dtype().to_string(),
                supported: "blocks: F32, F16, BF16",
            });
        };
        Ok(Some((format, t.into_byte_rows())))
    }
}

/// The block format of a float dtype's elements.
fn float_format(dtype: DType) -> Option<Format> {
    match dtype {
        DType::F32 => Some(Format::F32),
        DType::F16 => Some(Format::F16),
        DType::BF16 => Some(Format::BF16),
        _ => None,
    }
}

/// Tensors looked up by the names a model uses (its field paths), mapped to the
/// names its files use, across one or more sources searched in order.
///
/// ```no_run
/// # fn main() -> radix_io::Result<()> {
/// use radix_io::{Gguf, WeightStore};
/// let gguf = Gguf::open("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref())?;
/// let store = WeightStore::new(vec![Box::new(gguf)], |name: &str| name.replace("layers.", "blk."));
/// let norm = store.get("layers.0.attn_norm.weight", &[576])?;
/// # Ok(()) }
/// ```
pub struct WeightStore {
    sources: Vec<Box<dyn TensorSource>>,
    map_name: Box<dyn Fn(&str) -> String + Send + Sync>,
}

impl WeightStore {
    /// A store over `sources` (searched in order) that looks a model name up as
    /// `map_name(name)`.
    pub fn new(
        sources: Vec<Box<dyn TensorSource>>,
        map_name: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        WeightStore {
            sources,
            map_name: Box::new(map_name),
        }
    }

    /// A store over the files at `paths`, each opened by its extension (`.gguf`,
    /// `.safetensors`, `.safetensors.index.json`), with names used as stored.
    pub fn open(paths: &[&Path]) -> Result<Self> {
        let mut sources: Vec<Box<dyn TensorSource>> = Vec::new();
        for &p in paths {
            if p.extension().is_some_and(|e| e == "gguf") {
                sources.push(Box::new(Gguf::open(p)?));
            } else {
                sources.push(Box::new(Safetensors::open(p)?));
            }
        }
        Ok(WeightStore::new(sources, str::to_string))
    }

    /// The same sources with another name mapping.
    pub fn with_name_map(self, map_name: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        WeightStore {
            sources: self.sources,
            map_name: Box::new(map_name),
        }
    }

    /// The sources, in search order.
    pub fn sources(&self) -> &[Box<dyn TensorSource>] {
        &self.sources
    }

    /// The stored name that model name `name` maps to.
    pub fn stored_name(&self, name: &str) -> String {
        (self.map_name)(name)
    }

    /// Tensor `name` (a model name, mapped first) in whatever shape it is stored.
    /// `Err` naming both names and the files searched if no source has it.
    pub fn get_any_shape(&self, name: &str) -> Result<HostTensor> {
        let stored = self.stored_name(name);
        for s in &self.sources {
            if let Some(t) = s.tensor(&stored)? {
                return Ok(t);
            }
        }
        Err(self.missing(name, stored))
    }

    /// Tensor `name` (a model name, mapped first), which must have row-major dims
    /// `expected`: `Err` naming the file, both names and both shapes if not.
    /// The shape is checked before any data is read or dequantized.
    pub fn get(&self, name: &str, expected: &[i64]) -> Result<HostTensor> {
        self.read(name, expected, |source, stored| source.tensor(stored))
    }

    /// The format tensor `name` (a model name, mapped first) is stored in,
    /// if present and one radix keeps as blocks.
    pub fn format(&self, name: &str) -> Option<Format> {
        let stored = self.stored_name(name);
        self.sources.iter().find_map(|s| {
            s.dims(&stored)?;
            s.format(&stored)
        })
    }

    /// Tensor `name` (a model name, mapped first) as stored blocks: it must
    /// have row-major dims `expected` (in elements) and be stored as
    /// `format`; `Err` naming the file and both names if not.
    pub fn blocks(&self, name: &str, format: Format, expected: &[i64]) -> Result<HostTensor> {
        self.read(name, expected, |source, stored| {
            let Some((got, t)) = source.blocks(stored)? else {
                return Ok(None);
            };
            if got != format {
                return Err(Error::FormatMismatch {
                    path: source.file_of(stored).to_path_buf(),
                    name: name.to_string(),
                    stored: stored.to_string(),
                    expected: format.name(),
                    found: got.name(),
                });
            }
            Ok(Some(t))
        })
    }

    /// `read(source, stored name)` of the first source holding model name
    /// `name`, after checking that its dims are `expected`.
    fn read<T>(
        &self,
        name: &str,
        expected: &[i64],
        read: impl Fn(&dyn TensorSource, &str) -> Result<Option<T>>,
    ) -> Result<T> {
        let stored = self.stored_name(name);
        for s in &self.sources {
            let Some(found) = s.dims(&stored) else {
                continue;
            };
            if found != expected {
                return Err(Error::ShapeMismatch {
                    path: s.file_of(&stored).to_path_buf(),
                    name: name.to_string(),
                    stored,
                    expected: expected.to_vec(),
                    found,
                });
            }
            if let Some(t) = read(s.as_ref(), &stored)? {
                return Ok(t);
            }
        }
        Err(self.missing(name, stored))
    }

    fn missing(&self, name: &str, stored: String) -> Error {
        let files: Vec<String> = self
            .sources
            .iter()
            .map(|s| s.path().display().to_string())
            .collect();
        Error::MissingTensor {
            name: name.to_string(),
            stored,
            files: files.join(", "),
        }
    }
}

impl std::fmt::Debug for WeightStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let files: Vec<&Path> = self.sources.iter().map(|s| s.path()).collect();
        f.debug_struct("WeightStore")
            .field("sources", &files)
            .finish_non_exhaustive()
    }
}
