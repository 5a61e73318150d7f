//! Host arrays read from model files.

use std::fmt;
use std::sync::Arc;

use memmap2::Mmap;

use crate::{DType, Element};
use crate::{Error, Result};

/// A dense row-major array in host memory: a dtype, dims and bytes that are
/// either owned or a window into a memory-mapped file.
#[derive(Clone)]
pub struct HostTensor {
    dtype: DType,
    dims: Vec<i64>,
    data: Bytes,
}

/// The bytes of a [`HostTensor`].
#[derive(Clone)]
enum Bytes {
    /// Owned bytes, kept in `u64`s so that every element type is aligned.
    Owned { words: Vec<u64>, len: usize },
    /// `len` bytes at `start` of a shared memory map.
    Mapped {
        map: Arc<Mmap>,
        start: usize,
        len: usize,
    },
}

impl HostTensor {
    /// A tensor owning a copy of `data` (row-major, `dims` may be empty for a scalar).
    ///
    /// Panics if `data.len()` is not the product of `dims`: that is a caller bug.
    pub fn from_slice<T: Element>(dims: &[i64], data: &[T]) -> Self {
        let n: i64 = dims.iter().product();
        assert_eq!(
            n as usize,
            data.len(),
            "HostTensor::from_slice: dims {dims:?} do not match {} elements",
            data.len()
        );
        let len = std::mem::size_of_val(data);
        let mut words = vec![0u64; len.div_ceil(8)];
        // SAFETY: `words` holds at least `len` bytes and does not overlap `data`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr().cast::<u8>(),
                words.as_mut_ptr().cast::<u8>(),
                len,
            )
        };
        HostTensor {
            dtype: T::DTYPE,
            dims: dims.to_vec(),
            data: Bytes::Owned { words, len },
        }
    }

    /// A tensor of `dtype` owning a copy of `bytes` (its elements, row-major,
    /// little-endian).
    ///
    /// Panics if `bytes.len()` is not the size of `dims` elements of `dtype`:
    /// that is a caller bug.
    pub fn from_bytes(dtype: DType, dims: &[i64], bytes: &[u8]) -> Self {
        let n = dims.iter().product::<i64>() as usize;
        assert_eq!(
            n * dtype.size_in_bytes(),
            bytes.len(),
            "HostTensor::from_bytes: {dtype} {dims:?} do not match {} bytes",
            bytes.len()
        );
        HostTensor {
            dtype,
            dims: dims.to_vec(),
            ..HostTensor::from_slice(&[bytes.len() as i64], bytes)
        }
    }

    /// An `f32` tensor of `dims` whose elements `fill` writes in place (a
    /// dequantized weight: no second copy of a large tensor).
    pub(crate) fn f32_filled(dims: Vec<i64>, fill: impl FnOnce(&mut [f32])) -> Self {
        let n = dims.iter().product::<i64>() as usize;
        let len = n * 4;
        let mut words = vec![0u64; len.div_ceil(8)];
        // SAFETY: `words` holds at least `n` f32s, is aligned for them, and
        // every bit pattern is a valid f32.
        let values = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<f32>(), n) };
        fill(values);
        HostTensor {
            dtype: DType::F32,
            dims,
            data: Bytes::Owned { words, len },
        }
    }

    /// A tensor over `len` bytes at `start` of `map`; the caller has checked the
    /// range and that `len` matches `dtype` and `dims`.
    pub(crate) fn mapped(
        dtype: DType,
        dims: Vec<i64>,
        map: Arc<Mmap>,
        start: usize,
        len: usize,
    ) -> Self {
        debug_assert!(start + len <= map.len());
        HostTensor {
            dtype,
            dims,
            data: Bytes::Mapped { map, start, len },
        }
    }

    /// The same bytes as `u8` rows: the last dim counts bytes (`f32 [4, 8]`
    /// becomes `u8 [4, 32]`; a scalar becomes one row).
    pub fn into_byte_rows(self) -> HostTensor {
        let size = self.dtype.size_in_bytes() as i64;
        let mut dims = self.dims;
        match dims.last_mut() {
            Some(last) => *last *= size,
            None => dims.push(size),
        }
        HostTensor {
            dtype: DType::U8,
            dims,
            data: self.data,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dims, row-major (the last axis is the fastest).
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The number of elements.
    pub fn n_elements(&self) -> usize {
        self.dims.iter().product::<i64>() as usize
    }

    /// Whether the bytes are a window into a memory-mapped file (no copy was made).
    pub fn is_mapped(&self) -> bool {
        matches!(self.data, Bytes::Mapped { .. })
    }

    /// Lets the kernel drop this process's pages of a mapped tensor's bytes
    /// (`MADV_DONTNEED` over them): for a weight already copied into a
    /// device buffer, whose file pages would otherwise stay in the
    /// process's resident memory beside the copy until the map is dropped,
    /// the whole model twice at the end of a load. Reading the bytes later
    /// is still right: the map is of a file, read-only, so the pages fault
    /// in again from the page cache. Owned bytes, and off Unix: nothing.
    pub fn release_pages(&self) {
        self.release_pages_in(0..self.bytes().len());
    }

    /// [`HostTensor::release_pages`] for `range` of the bytes (with the
    /// rest of the pages it starts and ends in); out of range: nothing.
    pub fn release_pages_in(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if let Bytes::Mapped { map, start, len } = &self.data
            && range.start <= range.end
            && range.end <= *len
        {
            let (start, len) = (start + range.start, range.len());
            // SAFETY: `MADV_DONTNEED` on a read-only shared file mapping
            // (`map_file`) frees no memory that a borrow could still see:
            // a later access maps the file's page again, with the same
            // bytes. (memmap2 marks it unsafe for private and anonymous
            // maps, where it would zero what was written.) The advice is a
            // hint; a refusal leaves the pages resident.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len)
            };
        }
        #[cfg(not(unix))]
        let _ = range;
    }

    /// The raw little-endian bytes, row-major.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            // SAFETY: `words` holds at least `len` initialized bytes.
            Bytes::Owned { words, len } => unsafe {
                std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), *len)
            },
            Bytes::Mapped { map, start, len } => &map[*start..*start + *len],
        }
    }

    /// The elements as a slice of `T`, without a copy. `Err` if `T` is not this
    /// tensor's dtype or the bytes are not aligned for `T` (possible for mapped
    /// safetensors data; [`HostTensor::to_vec`] always works).
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.check_dtype::<T>()?;
        let bytes = self.bytes();
        let align = std::mem::align_of::<T>();
        if !(bytes.as_ptr() as usize).is_multiple_of(align) {
            return Err(Error::Misaligned {
                addr: bytes.as_ptr() as usize,
                align,
                dtype: self.dtype,
            });
        }
        if T::DTYPE == DType::Bool && bytes.iter().any(|&b| b > 1) {
            // Only 0 and 1 are valid `bool`s; copy through `to_vec` instead.
            return Err(Error::DTypeMismatch {
                found: self.dtype,
                asked: T::DTYPE,
            });
        }
        // SAFETY: the dtype matches `T` (so the length is a multiple of its size),
        // the pointer is aligned, every bit pattern is a valid `T` (bools were
        // checked above), and the slice borrows `self`.
        Ok(unsafe {
            std::slice::from_raw_parts(
                bytes.as_ptr().cast::<T>(),
                bytes.len() / std::mem::size_of::<T>(),
            )
        })
    }

    /// The elements copied into a `Vec<T>` (works for unaligned data). `Err` if
    /// `T` is not this tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_dtype::<T>()?;
        let size = std::mem::size_of::<T>();
        Ok(self
            .bytes()
            .chunks_exact(size)
            .map(|c| {
                if T::DTYPE == DType::Bool {
                    return T::from_f64(f64::from(c[0] != 0));
                }
                // SAFETY: `c` has `size_of::<T>()` bytes and every bit pattern is a valid `T`.
                unsafe { std::ptr::read_unaligned(c.as_ptr().cast::<T>()) }
            })
            .collect())
    }

    /// The elements converted to `f32` (exact for `f16`, `bf16` and `f32`; rounded
    /// for `f64` and wide integers).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        fn conv<T: Element>(t: &HostTensor) -> Vec<f32> {
            t.to_vec::<T>()
                .map(|v| v.into_iter().map(|x| x.to_f64() as f32).collect())
                .unwrap_or_default()
        }
        match self.dtype {
            DType::F32 => self.to_vec::<f32>().unwrap_or_default(),
            DType::F16 => self
                .to_vec::<half::f16>()
                .unwrap_or_default()
                .into_iter()
                .map(f32::from)
                .collect(),
            DType::BF16 => self
                .to_vec::<half::bf16>()
                .unwrap_or_default()
                .into_iter()
                .map(f32::from)
                .collect(),
            DType::Bool => conv::<bool>(self),
            DType::I8 => conv::<i8>(self),
            DType::I16 => conv::<i16>(self),
            DType::I32 => conv::<i32>(self),
            DType::I64 => conv::<i64>(self),
            DType::U8 => conv::<u8>(self),
            DType::U16 => conv::<u16>(self),
            DType::U32 => conv::<u32>(self),
            DType::U64 => conv::<u64>(self),
            DType::F64 => conv::<f64>(self),
        }
    }

    fn check_dtype<T: Element>(&self) -> Result<()> {
        if T::DTYPE != self.dtype {
            return Err(Error::DTypeMismatch {
                found: self.dtype,
                asked: T::DTYPE,
            });
        }
        Ok(())
    }
}

impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostTensor")
            .field("dtype", &self.dtype)
            .field("dims", &self.dims)
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::HostTensor;
    use crate::DType;

    /// A mapped tensor's bytes read the same after its pages were
    /// released, including pages it shares with its neighbours in the file.
    #[test]
    fn released_pages_read_the_same() {
        let bytes: Vec<u8> = (0..5 * 4096 + 123).map(|i| (i * 7 % 251) as u8).collect();
        let file = tempfile::NamedTempFile::new().expect("a temporary file");
        std::fs::write(file.path(), &bytes).expect("written");
        let map = Arc::new(crate::map_file(file.path()).expect("mapped"));
        let (start, len) = (1000, 3 * 4096 + 17);
        let tensor = HostTensor::mapped(DType::U8, vec![len as i64], map.clone(), start, len);
        let neighbour = HostTensor::mapped(DType::U8, vec![900], map, 100, 900);
        assert_eq!(tensor.bytes(), &bytes[start..start + len]);
        tensor.release_pages_in(5000..9000);
        assert_eq!(tensor.bytes(), &bytes[start..start + len]);
        tensor.release_pages_in(9000..len + 1); // past the end: nothing
        tensor.release_pages();
        assert_eq!(tensor.bytes(), &bytes[start..start + len]);
        assert_eq!(neighbour.bytes(), &bytes[100..1000]);
        let owned = HostTensor::from_bytes(DType::U8, &[4], &[1, 2, 3, 4]);
        owned.release_pages();
        assert_eq!(owned.bytes(), [1, 2, 3, 4]);
    }
}
