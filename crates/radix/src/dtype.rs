//! Element types of tensors and buffers ([`DType`], [`Element`], defined in
//! `radix-io` beside the host arrays and files that hold them) and their
//! PJRT names.

use radix_pjrt::ElementType;

pub use radix_io::dtype::{DType, Element};

/// The PJRT element type of `dtype`.
pub fn element_type(dtype: DType) -> ElementType {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_has_pjrts_name_and_size() {
        for d in DType::ALL {
            let t = element_type(d);
            assert_eq!(d.mlir_name(), t.mlir_name(), "{d:?}");
            assert_eq!(d.size_in_bytes(), t.byte_size(), "{d:?}");
        }
    }
}
