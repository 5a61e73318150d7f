//! `Buffer`: an array on a device with its [`Shape`] (tags included).

use radix_pjrt::ElementType;

use crate::literal::Literal;
use crate::{DType, Element, Error, Platform, Result, Shape};

/// An array on a device, with its shape and tags.
#[derive(Debug)]
pub struct Buffer {
    raw: radix_pjrt::Buffer,
    shape: Shape,
}

impl Buffer {
    /// Uploads `values` as an array of `shape` (whose dtype must be `T`'s).
    pub fn from_slice<T: Element>(
        platform: &Platform,
        values: &[T],
        shape: Shape,
    ) -> Result<Buffer> {
        if shape.dtype() != T::DTYPE || shape.count() != values.len() {
            return Err(Error::Host(format!(
                "{} values of {} for {shape}",
                values.len(),
                T::DTYPE
            )));
        }
        // SAFETY: every `Element` is plain old data without padding; we only read its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        Buffer::from_bytes(platform, bytes, shape)
    }

    /// Uploads a literal.
    pub fn from_literal(platform: &Platform, literal: &Literal) -> Result<Buffer> {
        Buffer::from_bytes(platform, &literal.to_bytes(), literal.shape())
    }

    /// Uploads the little-endian dense `bytes` of an array of `shape`.
    pub fn from_bytes(platform: &Platform, bytes: &[u8], shape: Shape) -> Result<Buffer> {
        let raw = platform.client().buffer_from_host(
            bytes,
            element_type(shape.dtype()),
            shape.dims(),
            platform.device(),
        )?;
        Ok(Buffer { raw, shape })
    }

    pub(crate) fn from_raw(raw: radix_pjrt::Buffer, shape: Shape) -> Buffer {
        Buffer { raw, shape }
    }

    /// The shape, with tags.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The underlying PJRT buffer.
    pub fn raw(&self) -> &radix_pjrt::Buffer {
        &self.raw
    }

    /// Downloads the values as `T`s (which must be the dtype's type).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.shape.dtype() {
            return Err(Error::Host(format!(
                "reading {} as {}",
                self.shape,
                T::DTYPE
            )));
        }
        let bytes = self.raw.to_host_vec()?;
        let n = self.shape.count();
        let mut res: Vec<T> = Vec::with_capacity(n);
        // SAFETY: `bytes` holds `n` dense little-endian `T`s (checked dtype);
        // every bit pattern the device writes is a valid `T` (bools are 0 or 1).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                res.as_mut_ptr().cast::<u8>(),
                n * size_of::<T>(),
            );
            res.set_len(n);
        }
        Ok(res)
    }

    /// Downloads the values as a literal.
    pub fn to_literal(&self) -> Result<Literal> {
        Ok(Literal::from_bytes(self.shape, &self.raw.to_host_vec()?))
    }
}

/// The PJRT element type of `dtype`.
pub(crate) fn element_type(dtype: DType) -> ElementType {
    match dtype {
        DType::Bool => ElementType::Bool,
        DType::I8 => ElementType::S8,
        DType::I16 => ElementType::S16,
        DType::I32 => ElementType::S32,
        DType::I64 => ElementType::S64,
        DType::U8 => ElementType::U8,
        DType::U16 => ElementType::U16,
        DType::U32 => ElementType::U32,
        DType::U64 => ElementType::U64,
        DType::F16 => ElementType::F16,
        DType::BF16 => ElementType::BF16,
        DType::F32 => ElementType::F32,
        DType::F64 => ElementType::F64,
    }
}
