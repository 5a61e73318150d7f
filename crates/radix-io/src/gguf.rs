//! GGUF files (llama.cpp's format): header, metadata, tensor infos and tensor
//! data, memory-mapped.
//!
//! Layout (little-endian): magic `GGUF`, version (2 or 3), tensor count, metadata
//! count, the metadata key/value pairs, the tensor infos (name, dims with `ne[0]`
//! the fastest axis, ggml type, offset), padding to `general.alignment` (default
//! 32), then the tensor data. radix exposes dims row-major (`ne` reversed) and
//! reads F32, F16, BF16 and the block formats radix-quant decodes (Q8_0,
//! Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) as `f32`, dequantized as ggml
//! does, or as their raw blocks ([`Gguf::blocks`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use crate::DType;
use crate::{Error, HostTensor, Result, TensorSource};
use radix_quant::Format;

/// The ggml types radix reads, for error messages.
const SUPPORTED: &str = "supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K";
/// The alignment of tensor data when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's maximum number of dims.
const MAX_DIMS: u32 = 4;
/// The most tensors, metadata entries and array items a file may have in
/// all (the largest vocabularies have some 260,000 tokens and as many
/// merges).
const MAX_ITEMS: usize = 1 << 24;
/// How deep arrays of arrays may nest (a corrupt file must not blow the stack).
const MAX_NESTING: u32 = 8;

/// A memory-mapped GGUF file: its metadata and tensor infos, parsed and checked
/// on open; tensor data read (and dequantized) on request.
#[derive(Debug)]
pub struct Gguf {
    path: PathBuf,
    map: Arc<Mmap>,
    version: u32,
    alignment: u64,
    /// Where the data section starts in the file.
    data_start: usize,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
    by_name: BTreeMap<String, usize>,
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `float32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// `string` (UTF-8).
    String(String),
    /// `array` of values of one type.
    Array(Vec<GgufValue>),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float64`.
    F64(f64),
}

/// A ggml tensor type, by its number in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

/// What a GGUF file says about one tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`, ...).
    pub name: String,
    /// The stored type.
    pub ty: GgmlType,
    /// The dims, row-major: the file's `ne` reversed, so the last is the fastest.
    pub dims: Vec<i64>,
    /// The data offset, relative to the start of the data section.
    pub offset: u64,
}

impl Gguf {
    /// Opens and maps `path`, parsing and checking its header, metadata and
    /// tensor infos (every tensor's data must lie inside the file).
    pub fn open(path: &Path) -> Result<Self> {
        let map = super::map_file(path)?;
        let parsed = parse(&map).map_err(|reason| Error::Gguf {
            path: path.to_path_buf(),
            reason,
        })?;
        let by_name = parsed
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Gguf {
            path: path.to_path_buf(),
            map: Arc::new(map),
            version: parsed.version,
            alignment: parsed.alignment,
            data_start: parsed.data_start,
            metadata: parsed.metadata,
            tensors: parsed.tensors,
            by_name,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of tensor data in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// All metadata, by key.
    pub fn metadata(&self) -> &BTreeMap<String, GgufValue> {
        &self.metadata
    }

    /// The metadata value at `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    /// The tensor infos, in file order.
    pub fn tensor_infos(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The info of tensor `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// Tensor `name` as `f32` with row-major dims, or `None` if absent. F32 data is
    /// mapped without a copy; F16 and BF16 are converted and the block formats
    /// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) dequantized as ggml
    /// does. Any other type is an `Err` naming it and the tensor.
    pub fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        let Some((format, info, start, len)) = self.stored(name)? else {
            return Ok(None);
        };
        let dims = info.dims.clone();
        if format == Format::F32 {
            return Ok(Some(HostTensor::mapped(
                DType::F32,
                dims,
                self.map.clone(),
                start,
                len,
            )));
        }
        let bytes = &self.map[start..start + len];
        Ok(Some(HostTensor::f32_filled(dims, |out| {
            radix_quant::dequantize(format, bytes, out)
                .expect("open checked the tensor's columns and byte range")
        })))
    }

    /// Tensor `name` as stored, or `None` if absent: its format and its rows
    /// of blocks as `u8` with row-major dims whose last is the bytes of a row
    /// (`[4, 64]` in Q4_1 is `[4, 40]`), mapped without a copy. A type radix
    /// does not decode is an `Err` naming it and the tensor.
    pub fn blocks(&self, name: &str) -> Result<Option<(Format, HostTensor)>> {
        let Some((format, info, start, len)) = self.stored(name)? else {
            return Ok(None);
        };
        let mut dims = info.dims.clone();
        let cols = dims.last().copied().unwrap_or(1) as usize;
        let row_bytes = format
            .row_bytes(cols)
            .expect("open checked that rows are whole blocks");
        match dims.last_mut() {
            Some(last) => *last = row_bytes as i64,
            None => dims.push(row_bytes as i64),
        }
        let host = HostTensor::mapped(DType::U8, dims, self.map.clone(), start, len);
        Ok(Some((format, host)))
    }

    /// The format and info of tensor `name` and the byte range of its
    /// data, or `None` if absent; `Err` if radix does not decode its type.
    fn stored(&self, name: &str) -> Result<Option<(Format, &GgufTensorInfo, usize, usize)>> {
        let Some(info) = self.tensor_info(name) else {
            return Ok(None);
        };
        let format = Format::from_ggml_type(info.ty.0).map_err(|_| Error::UnsupportedType {
            path: self.path.clone(),
            tensor: name.to_string(),
            ty: info.ty.name(),
            supported: SUPPORTED,
        })?;
        let n = info.dims.iter().product::<i64>() as usize;
        let len = info.ty.n_bytes(n).expect("radix's formats are ggml's");
        Ok(Some((
            format,
            info,
            self.data_start + info.offset as usize,
            len,
        )))
    }
}

impl TensorSource for Gguf {
    fn path(&self) -> &Path {
        &self.path
    }

    fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    fn dims(&self, name: &str) -> Option<Vec<i64>> {
        self.tensor_info(name).map(|t| t.dims.clone())
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        Gguf::tensor(self, name)
    }

    fn format(&self, name: &str) -> Option<Format> {
        Format::from_ggml_type(self.tensor_info(name)?.ty.0).ok()
    }

    fn blocks(&self, name: &str) -> Result<Option<(Format, HostTensor)>> {
        Gguf::blocks(self, name)
    }
}

impl GgufValue {
    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an array, if it is one.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The value as a `bool`, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            GgufValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The value as an `i64`, if it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::U64(v) => i64::try_from(v).ok(),
            GgufValue::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as an `f64`, if it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }
}

impl GgmlType {
    /// `F32`.
    pub const F32: GgmlType = GgmlType(0);
    /// `F16`.
    pub const F16: GgmlType = GgmlType(1);
    /// `Q4_0`: blocks of 32, an `f16` scale and 4-bit values offset by 8.
    pub const Q4_0: GgmlType = GgmlType(2);
    /// `Q4_1`: blocks of 32, an `f16` scale and minimum and 4-bit values.
    pub const Q4_1: GgmlType = GgmlType(3);
    /// `Q8_0`: blocks of 32, an `f16` scale and 8-bit signed values.
    pub const Q8_0: GgmlType = GgmlType(8);
    /// `BF16`.
    pub const BF16: GgmlType = GgmlType(30);

    /// The type's name in ggml (`Q4_K`, ...), or `type N` for an unknown number.
    pub fn name(self) -> String {
        const NAMES: [&str; 40] = [
            "F32",
            "F16",
            "Q4_0",
            "Q4_1",
            "Q4_2",
            "Q4_3",
            "Q5_0",
            "Q5_1",
            "Q8_0",
            "Q8_1",
            "Q2_K",
            "Q3_K",
            "Q4_K",
            "Q5_K",
            "Q6_K",
            "Q8_K",
            "IQ2_XXS",
            "IQ2_XS",
            "IQ3_XXS",
            "IQ1_S",
            "IQ4_NL",
            "IQ3_S",
            "IQ2_S",
            "IQ4_XS",
            "I8",
            "I16",
            "I32",
            "I64",
            "F64",
            "IQ1_M",
            "BF16",
            "Q4_0_4_4",
            "Q4_0_4_8",
            "Q4_0_8_8",
            "TQ1_0",
            "TQ2_0",
            "IQ4_NL_4_4",
            "IQ4_NL_4_8",
            "IQ4_NL_8_8",
            "MXFP4",
        ];
        match NAMES.get(self.0 as usize) {
            Some(n) => (*n).to_string(),
            None => format!("type {}", self.0),
        }
    }

    /// `(elements per block, bytes per block)` for every type ggml knows (as in
    /// ggml's `type_traits`), so that the data range of any tensor can be checked.
    fn storage(self) -> Option<(usize, usize)> {
        Some(match self.0 {
            0 => (1, 4),
            1 | 30 => (1, 2),
            2 | 20 => (32, 18),
            3 => (32, 20),
            6 => (32, 22),
            7 => (32, 24),
            8 => (32, 34),
            9 => (32, 36),
            10 => (256, 84),
            11 | 21 => (256, 110),
            12 => (256, 144),
            13 => (256, 176),
            14 => (256, 210),
            15 => (256, 292),
            16 | 35 => (256, 66),
            17 => (256, 74),
            18 => (256, 98),
            19 => (256, 50),
            22 => (256, 82),
            23 => (256, 136),
            24 => (1, 1),
            25 => (1, 2),
            26 => (1, 4),
            27 | 28 => (1, 8),
            29 => (256, 56),
            34 => (256, 54),
            39 => (32, 17),
            _ => return None,
        })
    }

    /// The bytes `n` elements take (`n` a whole number of blocks).
    fn n_bytes(self, n: usize) -> Option<usize> {
        let (block, size) = self.storage()?;
        (n / block).checked_mul(size)
    }
}

/// The header, metadata and tensor infos of a GGUF file.
struct Parsed {
    version: u32,
    alignment: u64,
    data_start: usize,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
}

/// Parses and checks everything but the tensor data; the error is the reason.
fn parse(buf: &[u8]) -> std::result::Result<Parsed, String> {
    let mut r = Reader {
        buf,
        pos: 0,
        items_left: MAX_ITEMS,
    };
    let magic = r
        .bytes(4)
        .map_err(|_| "file too short for the GGUF magic".to_string())?;
    if magic != b"GGUF" {
        return Err(format!("bad magic {magic:?} (expected \"GGUF\")"));
    }
    let version = r.u32()?;
    match version {
        2 | 3 => {}
        1 => return Err("GGUF version 1 is not supported".into()),
        v if v.swap_bytes() <= 3 => return Err("big-endian GGUF files are not supported".into()),
        v => return Err(format!("unknown GGUF version {v}")),
    }
    let n_tensors = r.items("tensor count")?;
    let n_kv = r.items("metadata count")?;
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = r.string()?;
        let ty = r.u32()?;
        let value = r
            .value(ty, 0)
            .map_err(|e| format!("metadata `{key}`: {e}"))?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(format!("duplicate metadata key `{key}`"));
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(GgufValue::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(v) => {
            return Err(format!(
                "`general.alignment` is {v:?}, not a power of two (u32)"
            ));
        }
    };
    let mut tensors = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let name = r.string()?;
        let n_dims = r.u32()?;
        if n_dims > MAX_DIMS {
            return Err(format!(
                "tensor `{name}` has {n_dims} dims (at most {MAX_DIMS})"
            ));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let d = r.u64()?;
            ne.push(i64::try_from(d).map_err(|_| format!("tensor `{name}` has dim {d}"))?);
        }
        let ty = GgmlType(r.u32()?);
        let offset = r.u64()?;
        ne.reverse();
        tensors.push(GgufTensorInfo {
            name,
            ty,
            dims: ne,
            offset,
        });
    }
    let data_start = r
        .pos
        .div_ceil(alignment as usize)
        .checked_mul(alignment as usize)
        .ok_or("header too large")?;
    for t in &tensors {
        check_tensor(t, alignment, data_start, buf.len())?;
    }
    let mut names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("duplicate tensor `{}`", w[0]));
    }
    Ok(Parsed {
        version,
        alignment,
        data_start,
        metadata,
        tensors,
    })
}

/// Checks a tensor's element count, block structure and data range.
fn check_tensor(
    t: &GgufTensorInfo,
    alignment: u64,
    data_start: usize,
    file_len: usize,
) -> std::result::Result<(), String> {
    let name = &t.name;
    let n = t
        .dims
        .iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .ok_or(format!("tensor `{name}` is too large"))?;
    if !t.offset.is_multiple_of(alignment) {
        return Err(format!(
            "tensor `{name}` has offset {} not aligned to {alignment}",
            t.offset
        ));
    }
    // A type ggml does not know: its size is unknown, so only its start is checked.
    let Some((block, _)) = t.ty.storage() else {
        let start = usize::try_from(t.offset)
            .ok()
            .and_then(|o| o.checked_add(data_start));
        return match start {
            Some(s) if s <= file_len => Ok(()),
            _ => Err(format!(
                "tensor `{name}` starts past the end of the file (truncated?)"
            )),
        };
    };
    let fastest = t.dims.last().copied().unwrap_or(1);
    if fastest % block as i64 != 0 {
        return Err(format!(
            "tensor `{name}` of type {} has {fastest} columns, not a multiple of {block}",
            t.ty.name()
        ));
    }
    let len =
        t.ty.n_bytes(n as usize)
            .ok_or(format!("tensor `{name}` is too large"))?;
    let end = usize::try_from(t.offset)
        .ok()
        .and_then(|o| o.checked_add(data_start))
        .and_then(|s| s.checked_add(len));
    if end.is_none_or(|e| e > file_len) {
        return Err(format!(
            "tensor `{name}` ({} bytes at offset {}) runs past the end of the file ({file_len} bytes; truncated?)",
            len, t.offset
        ));
    }
    Ok(())
}

/// A cursor over the file's bytes; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// How many more items (see [`Reader::items`]) the file may hold.
    items_left: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(format!(
                "unexpected end of file at byte {} (reading {n} bytes; truncated?)",
                self.pos
            ));
        };
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    fn array<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let b = self.bytes(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of things that each take at least one byte, so at most the bytes left.
    fn count(&mut self, what: &str) -> std::result::Result<usize, String> {
        let n = self.u64()?;
        let left = (self.buf.len() - self.pos) as u64;
        if n > left {
            return Err(format!(
                "{what} {n} exceeds the {left} bytes left in the file (corrupt?)"
            ));
        }
        Ok(n as usize)
    }

    /// A [`Reader::count`] of items that become values in memory (tensor
    /// infos, metadata entries, array items), at most `MAX_ITEMS` in the
    /// whole file: a parsed item takes tens of bytes where the file may
    /// spend one, so the file's size alone does not bound the memory.
    fn items(&mut self, what: &str) -> std::result::Result<usize, String> {
        let n = self.count(what)?;
        self.items_left = self.items_left.checked_sub(n).ok_or_else(|| {
            format!("{what} {n} takes the file past the {MAX_ITEMS} items radix reads")
        })?;
        Ok(n)
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        let n = self.count("string length")?;
        let at = self.pos;
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| format!("string at byte {at} is not UTF-8"))
    }

    fn value(&mut self, ty: u32, depth: u32) -> std::result::Result<GgufValue, String> {
        Ok(match ty {
            0 => GgufValue::U8(u8::from_le_bytes(self.array()?)),
            1 => GgufValue::I8(i8::from_le_bytes(self.array()?)),
            2 => GgufValue::U16(u16::from_le_bytes(self.array()?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array()?)),
            4 => GgufValue::U32(self.u32()?),
            5 => GgufValue::I32(i32::from_le_bytes(self.array()?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(format!("bool byte {b}")),
            },
            8 => GgufValue::String(self.string()?),
            9 => {
                if depth >= MAX_NESTING {
                    return Err(format!("arrays nested more than {MAX_NESTING} deep"));
                }
                let elem = self.u32()?;
                let n = self.items("array length")?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1)?);
                }
                GgufValue::Array(items)
            }
            10 => GgufValue::U64(self.u64()?),
            11 => GgufValue::I64(i64::from_le_bytes(self.array()?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array()?)),
            t => return Err(format!("unknown value type {t}")),
        })
    }
}

/// A GGUF v3 file holding only string metadata (`kv`) and no tensors: the
/// smallest file that reaches a loader's metadata checks.
pub fn strings_only_file(kv: &[(&str, &str)]) -> Vec<u8> {
    let mut g = b"GGUF".to_vec();
    g.extend(3u32.to_le_bytes());
    g.extend(0u64.to_le_bytes());
    g.extend((kv.len() as u64).to_le_bytes());
    for (k, v) in kv {
        g.extend((k.len() as u64).to_le_bytes());
        g.extend(k.as_bytes());
        // Value type 8: a string.
        g.extend(8u32.to_le_bytes());
        g.extend((v.len() as u64).to_le_bytes());
        g.extend(v.as_bytes());
    }
    g
}
