//! Host arrays of numbers for constants, tests and the reference interpreter.

use crate::{DType, Element, Shape};

/// A dense row-major host array: a shape and its values as `f64` (exact for
/// every dtype but 64-bit integers beyond 2^53).
#[derive(Debug, Clone, PartialEq)]
pub struct Literal {
    shape: Shape,
    data: Vec<f64>,
}

impl Literal {
    /// A literal of `shape` holding `data`, rounded to the shape's dtype.
    ///
    /// # Panics
    /// If `data` does not have `shape.count()` values.
    pub fn new(shape: Shape, data: Vec<f64>) -> Literal {
        assert_eq!(
            data.len(),
            shape.count(),
            "{} values for {shape}",
            data.len()
        );
        let data = data
            .into_iter()
            .map(|v| round_to(shape.dtype(), v))
            .collect();
        Literal { shape, data }
    }

    /// A literal of `T`s with sizes `dims`.
    pub fn from_slice<T: Element>(values: &[T], dims: &[i64]) -> Literal {
        Literal::new(
            Shape::new(T::DTYPE, dims),
            values.iter().map(|v| v.to_f64()).collect(),
        )
    }

    /// A literal from the little-endian bytes of a dense array of `shape`.
    pub fn from_bytes(shape: Shape, bytes: &[u8]) -> Literal {
        Literal {
            shape,
            data: decode(shape.dtype(), bytes),
        }
    }

    /// The shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The values, row-major.
    pub fn data(&self) -> &[f64] {
        &self.data
    }

    /// The values converted to `T`.
    pub fn to_vec<T: Element>(&self) -> Vec<T> {
        self.data.iter().map(|&v| T::from_f64(v)).collect()
    }

    /// The little-endian bytes of the values in the shape's dtype.
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self.shape.dtype(), &self.data)
    }
}

/// `v` rounded to the nearest value of `dtype` (integers truncate toward
/// zero and wrap as Rust's `as` does from `i64`; floats round to nearest).
pub fn round_to(dtype: DType, v: f64) -> f64 {
    let int = |v: f64| if v.is_nan() { 0 } else { v.trunc() as i64 };
    match dtype {
        DType::Bool => (v != 0.0) as u8 as f64,
        DType::I8 => int(v) as i8 as f64,
        DType::I16 => int(v) as i16 as f64,
        DType::I32 => int(v) as i32 as f64,
        DType::I64 => int(v) as f64,
        DType::U8 => int(v) as u8 as f64,
        DType::U16 => int(v) as u16 as f64,
        DType::U32 => int(v) as u32 as f64,
        DType::U64 => (if v.is_nan() { 0 } else { v.trunc() as u64 }) as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => <half::bf16 as Element>::from_f64(v).to_f64(),
        DType::F32 => v as f32 as f64,
        DType::F64 => v,
    }
}

/// The little-endian bytes of `values` in `dtype`.
pub fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dtype.size_in_bytes());
    for &v in values {
        match dtype {
            DType::Bool => out.push((v != 0.0) as u8),
            DType::I8 => out.extend((round_to(dtype, v) as i8).to_le_bytes()),
            DType::I16 => out.extend((round_to(dtype, v) as i16).to_le_bytes()),
            DType::I32 => out.extend((round_to(dtype, v) as i32).to_le_bytes()),
            DType::I64 => out.extend((v as i64).to_le_bytes()),
            DType::U8 => out.extend((round_to(dtype, v) as u8).to_le_bytes()),
            DType::U16 => out.extend((round_to(dtype, v) as u16).to_le_bytes()),
            DType::U32 => out.extend((round_to(dtype, v) as u32).to_le_bytes()),
            DType::U64 => out.extend((v as u64).to_le_bytes()),
            DType::F16 => out.extend(half::f16::from_f64(v).to_le_bytes()),
            DType::BF16 => out.extend(<half::bf16 as Element>::from_f64(v).to_le_bytes()),
            DType::F32 => out.extend((v as f32).to_le_bytes()),
            DType::F64 => out.extend(v.to_le_bytes()),
        }
    }
    out
}

/// The values of little-endian `bytes` of `dtype`.
pub fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    let n = dtype.size_in_bytes();
    bytes
        .chunks_exact(n)
        .map(|c| {
            let b = |k: usize| -> [u8; 8] {
                let mut a = [0u8; 8];
                a[..k].copy_from_slice(&c[..k]);
                a
            };
            match dtype {
                DType::Bool => (c[0] != 0) as u8 as f64,
                DType::I8 => c[0] as i8 as f64,
                DType::I16 => i16::from_le_bytes([c[0], c[1]]) as f64,
                DType::I32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
                DType::I64 => i64::from_le_bytes(b(8)) as f64,
                DType::U8 => c[0] as f64,
                DType::U16 => u16::from_le_bytes([c[0], c[1]]) as f64,
                DType::U32 => u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
                DType::U64 => u64::from_le_bytes(b(8)) as f64,
                DType::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::BF16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
                DType::F64 => f64::from_le_bytes(b(8)),
            }
        })
        .collect()
}

/// Row-major strides of `dims` in elements.
pub fn strides(dims: &[i64]) -> Vec<usize> {
    let mut res = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        res[i] = res[i + 1] * dims[i + 1] as usize;
    }
    res
}

/// The multi-index of flat position `flat` in `dims`.
pub fn unravel(mut flat: usize, dims: &[i64]) -> Vec<usize> {
    let mut res = vec![0usize; dims.len()];
    for i in (0..dims.len()).rev() {
        let d = dims[i] as usize;
        res[i] = flat % d.max(1);
        flat /= d.max(1);
    }
    res
}
