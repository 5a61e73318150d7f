//! Memory-mapped safetensors files: a single `*.safetensors` file or the shards
//! listed by a `*.safetensors.index.json`; [`save`] writes one file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::Dtype as StDtype;

use crate::DType;
use crate::{Error, HostTensor, Result, TensorSource};

/// The safetensors dtypes radix reads, for error messages.
const SUPPORTED: &str =
    "supported: BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64";

/// One safetensors checkpoint, possibly sharded, memory-mapped; tensors are read
/// without a copy.
#[derive(Debug)]
pub struct Safetensors {
    path: PathBuf,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, Entry>,
}

/// What a safetensors header says about one tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The stored dtype's name (`F32`, `BF16`, `F8_E4M3`, ...).
    pub dtype: String,
    /// The dims, row-major.
    pub dims: Vec<i64>,
}

#[derive(Debug)]
struct Shard {
    path: PathBuf,
    map: Arc<Mmap>,
}

#[derive(Debug)]
struct Entry {
    shard: usize,
    dtype: StDtype,
    dims: Vec<i64>,
    /// Absolute byte range in the shard's map.
    start: usize,
    len: usize,
}

impl Safetensors {
    /// Opens `path`: a `*.safetensors` file, or a `*.safetensors.index.json` whose
    /// `weight_map` names shards in the same directory (a name with a folder,
    /// `..` or a root in it is an error).
    pub fn open(path: &Path) -> Result<Self> {
        let is_index = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".json"));
        let mut st = Safetensors {
            path: path.to_path_buf(),
            shards: Vec::new(),
            tensors: BTreeMap::new(),
        };
        if is_index {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let index: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| bad(path, format!("shard index is not JSON: {e}")))?;
            let map = index
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| bad(path, "shard index has no `weight_map` object".into()))?;
            let dir = path.parent().unwrap_or(Path::new("."));
            let mut files = BTreeSet::new();
            for (name, file) in map {
                let file = file
                    .as_str()
                    .ok_or_else(|| bad(path, format!("`weight_map[{name}]` is not a string")))?;
                // A shard is a file beside the index: no folder, no `..`,
                // no absolute path, so an index cannot map another file.
                let mut parts = Path::new(file).components();
                if !matches!(
                    (parts.next(), parts.next()),
                    (Some(std::path::Component::Normal(_)), None)
                ) {
                    return Err(bad(
                        path,
                        format!(
                            "`weight_map[{name}]` is {file:?}, not a file name in the index's folder"
                        ),
                    ));
                }
                files.insert(file);
            }
            for file in files {
                st.add_shard(&dir.join(file))?;
            }
            for name in map.keys() {
                if !st.tensors.contains_key(name) {
                    return Err(bad(
                        path,
                        format!("tensor `{name}` is in the index but in none of its shards"),
                    ));
                }
            }
        } else {
            st.add_shard(path)?;
        }
        Ok(st)
    }

    /// The file this checkpoint was opened from (the index for a sharded one).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shard files, in the order they were mapped.
    pub fn shard_paths(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// The stored dtype and dims of tensor `name`, if present.
    pub fn info(&self, name: &str) -> Option<TensorInfo> {
        self.tensors.get(name).map(|e| TensorInfo {
            dtype: e.dtype.to_string(),
            dims: e.dims.clone(),
        })
    }

    /// Tensor `name` as stored, or `None` if absent; `Err` if its dtype is one
    /// radix has no [`DType`] for (FP8, FP4, ...).
    pub fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        let Some(e) = self.tensors.get(name) else {
            return Ok(None);
        };
        let shard = &self.shards[e.shard];
        let dtype = dtype(e.dtype).ok_or_else(|| Error::UnsupportedType {
            path: shard.path.clone(),
            tensor: name.to_string(),
            ty: e.dtype.to_string(),
            supported: SUPPORTED,
        })?;
        Ok(Some(HostTensor::mapped(
            dtype,
            e.dims.clone(),
            shard.map.clone(),
            e.start,
            e.len,
        )))
    }

    fn add_shard(&mut self, path: &Path) -> Result<()> {
        let map = super::map_file(path)?;
        let (header_len, meta) = safetensors::SafeTensors::read_metadata(&map)
            .map_err(|e| bad(path, format!("{e:?}")))?;
        let data_start = 8 + header_len;
        let shard = self.shards.len();
        for (name, info) in meta.tensors() {
            let (begin, end) = info.data_offsets;
            let n_elements = info
                .shape
                .iter()
                .try_fold(1usize, |acc, &d| acc.checked_mul(d));
            let n_bits = n_elements.and_then(|n| n.checked_mul(info.dtype.bitsize()));
            let in_file = data_start
                .checked_add(end)
                .is_some_and(|stop| stop <= map.len());
            if begin > end || !in_file || n_bits != Some((end - begin) * 8) {
                return Err(bad(
                    path,
                    format!(
                        "tensor `{name}` has inconsistent shape {:?} and offsets",
                        info.shape
                    ),
                ));
            }
            let dims = info.shape.iter().map(|&d| d as i64).collect();
            let entry = Entry {
                shard,
                dtype: info.dtype,
                dims,
                start: data_start + begin,
                len: end - begin,
            };
            if self.tensors.insert(name.clone(), entry).is_some() {
                return Err(bad(
                    path,
                    format!("tensor `{name}` appears in more than one shard"),
                ));
            }
        }
        self.shards.push(Shard {
            path: path.to_path_buf(),
            map: Arc::new(map),
        });
        Ok(())
    }
}

impl TensorSource for Safetensors {
    fn path(&self) -> &Path {
        &self.path
    }

    fn file_of(&self, name: &str) -> &Path {
        match self.tensors.get(name) {
            Some(e) => &self.shards[e.shard].path,
            None => &self.path,
        }
    }

    fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    fn dims(&self, name: &str) -> Option<Vec<i64>> {
        self.tensors.get(name).map(|e| e.dims.clone())
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        Safetensors::tensor(self, name)
    }
}

fn bad(path: &Path, reason: String) -> Error {
    Error::Safetensors {
        path: path.to_path_buf(),
        reason,
    }
}

/// Writes `tensors` (name, tensor) to a safetensors file at `path`, with
/// `metadata` in its header (`__metadata__`), through a temporary file
/// renamed once written. `Err` naming the file if a dtype has no
/// safetensors name or writing fails.
///
/// ```
/// # fn main() -> radix_io::Result<()> {
/// use radix_io::{HostTensor, Safetensors, TensorSource};
/// let dir = std::env::temp_dir().join(format!("radix-io-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).expect("a folder");
/// let path = dir.join("a.safetensors");
/// let t = HostTensor::from_slice(&[2], &[1f32, 2.0]);
/// radix_io::safetensors::save(&path, &[("w", &t)], &[("format", "pt")])?;
/// let back = Safetensors::open(&path)?.tensor("w")?.expect("saved");
/// assert_eq!(back.to_f32_vec(), [1.0, 2.0]);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(()) }
/// ```
pub fn save(path: &Path, tensors: &[(&str, &HostTensor)], metadata: &[(&str, &str)]) -> Result<()> {
    let fail = |reason: String| Error::Safetensors {
        path: path.to_path_buf(),
        reason,
    };
    let mut views = Vec::with_capacity(tensors.len());
    for &(name, t) in tensors {
        let dtype = st_dtype(t.dtype()).ok_or_else(|| {
            fail(format!(
                "`{name}` is {}, which safetensors cannot hold",
                t.dtype()
            ))
        })?;
        let shape: Vec<usize> = t.dims().iter().map(|&d| d as usize).collect();
        let view = safetensors::tensor::TensorView::new(dtype, shape, t.bytes())
            .map_err(|e| fail(format!("`{name}`: {e}")))?;
        views.push((name, view));
    }
    let metadata: std::collections::HashMap<String, String> = metadata
        .iter()
        .map(|&(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let bytes =
        safetensors::tensor::serialize(views, Some(metadata)).map_err(|e| fail(e.to_string()))?;
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The safetensors dtype of `d`.
fn st_dtype(d: DType) -> Option<StDtype> {
    [
        StDtype::BOOL,
        StDtype::U8,
        StDtype::I8,
        StDtype::U16,
        StDtype::I16,
        StDtype::U32,
        StDtype::I32,
        StDtype::U64,
        StDtype::I64,
        StDtype::F16,
        StDtype::BF16,
        StDtype::F32,
        StDtype::F64,
    ]
    .into_iter()
    .find(|&s| dtype(s) == Some(d))
}

fn dtype(d: StDtype) -> Option<DType> {
    Some(match d {
        StDtype::BOOL => DType::Bool,
        StDtype::U8 => DType::U8,
        StDtype::I8 => DType::I8,
        StDtype::U16 => DType::U16,
        StDtype::I16 => DType::I16,
        StDtype::U32 => DType::U32,
        StDtype::I32 => DType::I32,
        StDtype::U64 => DType::U64,
        StDtype::I64 => DType::I64,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        _ => return None,
    })
}
