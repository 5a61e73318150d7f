//! NumPy `.npy` and `.npz` files as raw arrays: an element type, dimensions,
//! and little-endian bytes in C order. `npyz` parses and writes the headers;
//! an `.npz` is a zip of `.npy` files. NumPy has no bfloat16: `ml_dtypes`
//! saves it as the two-byte raw type `<V2`, which is read and written as bf16.

use std::io::{Cursor, Read, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};
use npyz::{DType, Endianness, Order, TypeChar, TypeStr, WriterBuilder};
use radix_pjrt::ElementType;

/// One array: element type, dimensions, and its little-endian bytes in C order.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    ty: ElementType,
    dims: Vec<i64>,
    data: Vec<u8>,
}

impl Array {
    /// An array of `ty` and `dims` holding `data`, which must be exactly the
    /// array's byte size.
    pub fn new(ty: ElementType, dims: Vec<i64>, data: Vec<u8>) -> Result<Array> {
        let want = radix_pjrt::byte_len(ty, &dims)?;
        if data.len() != want {
            bail!(
                "{} bytes for a {}{dims:?} array of {want} bytes",
                data.len(),
                ty.mlir_name()
            );
        }
        Ok(Array { ty, dims, data })
    }

    /// The element type.
    pub fn ty(&self) -> ElementType {
        self.ty
    }

    /// The dimensions.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The little-endian bytes in C order.
    pub fn data(&self) -> &[u8] {
        &self.data
    }
}

/// Reads a `.npy` file.
pub fn read_npy(path: &Path) -> Result<Array> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_npy(&bytes).with_context(|| format!("{} is not a usable .npy file", path.display()))
}

/// The most bytes deflate can expand one compressed byte into (its longest
/// match, 258 bytes, coded in 2 bits): no honest entry decompresses past
/// this ratio, and a zip bomb is cut off where it would.
const DEFLATE_MAX_RATIO: u64 = 1032;

/// Reads every array of a `.npz` file, by name. Arrays named `arr_0`,
/// `arr_1`, … (as `numpy.savez` names positional arrays) come in index order,
/// other names in the archive's order. What is read is bounded by what the
/// file holds: an entry by what its compressed bytes can expand to, all of
/// them by as much for the whole file.
pub fn read_npz(path: &Path) -> Result<Vec<(String, Array)>> {
    read_npz_at_most(path, u64::MAX)
}

/// [`read_npz`], refusing any array of more than `max_array_bytes` (with
/// its header) before reading past that: a caller that knows what it needs
/// reads no more.
pub fn read_npz_at_most(path: &Path, max_array_bytes: u64) -> Result<Vec<(String, Array)>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut zip = zip::ZipArchive::new(file)
        .with_context(|| format!("{} is not a .npz (zip) file", path.display()))?;
    // Entries may share compressed bytes (a known zip bomb): the total is
    // bounded too, by what the whole file can expand to.
    let mut budget = file_len.saturating_mul(DEFLATE_MAX_RATIO);
    let mut res = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .with_context(|| format!("entry {i} of {}", path.display()))?;
        let Some(name) = entry.name().strip_suffix(".npy").map(str::to_string) else {
            continue;
        };
        let limit = entry
            .compressed_size()
            .saturating_mul(DEFLATE_MAX_RATIO)
            .min(max_array_bytes)
            .min(budget);
        let mut bytes = Vec::new();
        (&mut entry)
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .with_context(|| format!("array {name} of {}", path.display()))?;
        if bytes.len() as u64 > limit {
            bail!(
                "array {name} of {} holds more than {limit} bytes{}",
                path.display(),
                if limit == max_array_bytes {
                    ", more than any argument takes"
                } else {
                    ": more than its compressed bytes can hold (a zip bomb?)"
                }
            );
        }
        budget -= bytes.len() as u64;
        let array =
            parse_npy(&bytes).with_context(|| format!("array {name} of {}", path.display()))?;
        res.push((name, array));
    }
    let index = |name: &str| {
        name.strip_prefix("arr_")
            .and_then(|n| n.parse::<usize>().ok())
    };
    if res.iter().all(|(name, _)| index(name).is_some()) {
        res.sort_by_key(|(name, _)| index(name));
    }
    Ok(res)
}

/// Writes `arrays` to a `.npz` file (uncompressed, as `numpy.savez` does).
pub fn write_npz(path: &Path, arrays: &[(String, Array)]) -> Result<()> {
    // Every array is encoded before the file is touched (an unsupported
    // type fails here), then written beside it and renamed over it: an
    // existing file is replaced whole or not at all.
    let encoded: Vec<(&String, Vec<u8>)> = arrays
        .iter()
        .map(|(name, array)| Ok((name, npy_bytes(array)?)))
        .collect::<Result<_>>()?;
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(".{}.tmp", std::process::id()));
    let temp = std::path::PathBuf::from(temp);
    let write = || -> Result<()> {
        let file = std::fs::File::create(&temp)
            .with_context(|| format!("cannot create {}", temp.display()))?;
        let mut zip = zip::ZipWriter::new(file);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(true);
        for (name, bytes) in &encoded {
            zip.start_file(format!("{name}.npy"), options)?;
            zip.write_all(bytes)?;
        }
        zip.finish()?.sync_all()?;
        std::fs::rename(&temp, path)?;
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        e.context(format!("cannot write {}", path.display()))
    })
}

/// The `.npy` encoding of `array`.
pub fn npy_bytes(array: &Array) -> Result<Vec<u8>> {
    let descr: TypeStr = type_str(array.ty)?.parse()?;
    let shape: Vec<u64> = array.dims.iter().map(|&d| d as u64).collect();
    let mut out = npyz::WriteOptions::new_header_only()
        .dtype(DType::Plain(descr))
        .shape(&shape)
        .writer(Cursor::new(Vec::with_capacity(array.data.len() + 128)))
        .write_header_only()?
        .into_inner();
    out.extend_from_slice(&array.data);
    Ok(out)
}

/// The longest `.npy` header read, as numpy's own `max_header_size`.
const MAX_HEADER_BYTES: usize = 10_000;
/// The deepest brackets may nest in a header: a structured dtype with
/// sub-array shapes needs 3. The header parser npyz uses backtracks, and
/// takes exponential time in the depth (60 `{` in a 260-byte file: minutes).
const MAX_HEADER_NESTING: usize = 8;

/// Checks what the header parser would choke on: a header longer than
/// numpy writes, or brackets nested deeper than any dtype needs.
fn check_header(bytes: &[u8]) -> Result<()> {
    let (len, at) = match bytes.get(6) {
        Some(1) => (
            bytes
                .get(8..10)
                .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]]))),
            10,
        ),
        Some(2 | 3) => (
            bytes
                .get(8..12)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize),
            12,
        ),
        // npyz names what is wrong with the magic or the version.
        _ => return Ok(()),
    };
    let Some(len) = len else { return Ok(()) };
    if len > MAX_HEADER_BYTES {
        bail!("its header is {len} bytes, more than the {MAX_HEADER_BYTES} numpy reads");
    }
    let header = &bytes[at.min(bytes.len())..(at + len).min(bytes.len())];
    let mut depth = 0usize;
    for &b in header {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_HEADER_NESTING {
            bail!("its header nests brackets more than {MAX_HEADER_NESTING} deep");
        }
    }
    Ok(())
}

/// Parses the bytes of a `.npy` file.
fn parse_npy(bytes: &[u8]) -> Result<Array> {
    check_header(bytes)?;
    let mut reader = Cursor::new(bytes);
    let header = npyz::NpyHeader::from_reader(&mut reader)?;
    let DType::Plain(descr) = header.dtype() else {
        bail!(
            "structured dtype {} is not supported",
            header.dtype().descr()
        );
    };
    let ty = element_type(&descr)?;
    let dims: Vec<i64> = header.shape().iter().map(|&d| d as i64).collect();
    let start = reader.position() as usize;
    let want = radix_pjrt::byte_len(ty, &dims)?;
    let Some(raw) = start
        .checked_add(want)
        .and_then(|end| bytes.get(start..end))
    else {
        bail!(
            "{want} data bytes expected, {} present",
            bytes.len() - start
        );
    };
    let mut data = raw.to_vec();
    if descr.endianness() == Endianness::Big {
        // Complex numbers swap each of their two halves.
        let size = match ty {
            ElementType::C64 | ElementType::C128 => ty.byte_size() / 2,
            _ => ty.byte_size(),
        };
        data.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
    if header.order() == Order::Fortran && dims.len() > 1 {
        data = fortran_to_c(&data, &dims, ty.byte_size());
    }
    Array::new(ty, dims, data)
}

/// Reorders column-major (Fortran) elements of `size` bytes into row-major.
fn fortran_to_c(data: &[u8], dims: &[i64], size: usize) -> Vec<u8> {
    let n = data.len() / size;
    let mut out = vec![0u8; data.len()];
    let mut index = vec![0i64; dims.len()];
    for i in 0..n {
        // `index` is the C-order index of element `i`; its Fortran offset:
        let mut offset = 0i64;
        for (&ix, &d) in index.iter().zip(dims).rev() {
            offset = offset * d + ix;
        }
        let offset = offset as usize * size;
        out[i * size..(i + 1) * size].copy_from_slice(&data[offset..offset + size]);
        for (ix, &d) in index.iter_mut().zip(dims).rev() {
            *ix += 1;
            if *ix < d {
                break;
            }
            *ix = 0;
        }
    }
    out
}

/// The element type of a NumPy type string.
fn element_type(descr: &TypeStr) -> Result<ElementType> {
    use ElementType::*;
    Ok(match (descr.type_char(), descr.size_field()) {
        (TypeChar::Bool, 1) => Bool,
        (TypeChar::Int, 1) => S8,
        (TypeChar::Int, 2) => S16,
        (TypeChar::Int, 4) => S32,
        (TypeChar::Int, 8) => S64,
        (TypeChar::Uint, 1) => U8,
        (TypeChar::Uint, 2) => U16,
        (TypeChar::Uint, 4) => U32,
        (TypeChar::Uint, 8) => U64,
        (TypeChar::Float, 2) => F16,
        (TypeChar::Float, 4) => F32,
        (TypeChar::Float, 8) => F64,
        (TypeChar::Complex, 8) => C64,
        (TypeChar::Complex, 16) => C128,
        (TypeChar::RawData, 2) => BF16,
        _ => bail!("dtype {descr} is not supported"),
    })
}

/// The NumPy type string of an element type.
fn type_str(ty: ElementType) -> Result<&'static str> {
    use ElementType::*;
    Ok(match ty {
        Bool => "|b1",
        S8 => "|i1",
        S16 => "<i2",
        S32 => "<i4",
        S64 => "<i8",
        U8 => "|u1",
        U16 => "<u2",
        U32 => "<u4",
        U64 => "<u8",
        F16 => "<f2",
        BF16 => "<V2",
        F32 => "<f4",
        F64 => "<f8",
        C64 => "<c8",
        C128 => "<c16",
        _ => bail!("{} has no NumPy dtype", ty.mlir_name()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip() {
        let a = Array::new(ElementType::S16, vec![2, 3], (0..12).collect()).unwrap();
        assert_eq!(parse_npy(&npy_bytes(&a).unwrap()).unwrap(), a);
    }

    #[test]
    fn fortran_order_becomes_c_order() {
        // [[0, 1, 2], [3, 4, 5]] stored column-major: 0 3 1 4 2 5.
        let f = [0u8, 3, 1, 4, 2, 5];
        assert_eq!(fortran_to_c(&f, &[2, 3], 1), [0, 1, 2, 3, 4, 5]);
    }
}
