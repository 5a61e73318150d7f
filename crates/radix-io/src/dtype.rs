//! Element types of tensors and buffers.

use std::fmt;

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Booleans (`i1` in StableHLO, one byte per element on the host).
    Bool,
    /// Signed 8-bit integers.
    I8,
    /// Signed 16-bit integers.
    I16,
    /// Signed 32-bit integers.
    I32,
    /// Signed 64-bit integers.
    I64,
    /// Unsigned 8-bit integers.
    U8,
    /// Unsigned 16-bit integers.
    U16,
    /// Unsigned 32-bit integers.
    U32,
    /// Unsigned 64-bit integers.
    U64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 13] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element on the host and on the device.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// The element type's name in MLIR (`f32`, `bf16`, `i1`, `ui8`, ...).
    pub fn mlir_name(self) -> &'static str {
        match self {
            DType::Bool => "i1",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "ui8",
            DType::U16 => "ui16",
            DType::U32 => "ui32",
            DType::U64 => "ui64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Whether this is a signed or unsigned integer type (not `Bool`).
    pub fn is_integer(self) -> bool {
        !self.is_float() && self != DType::Bool
    }

    /// Whether this is an unsigned integer type.
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mlir_name())
    }
}

/// Rust element types that map to a [`DType`]: host arrays of these go in and
/// come out of executables.
pub trait Element: Copy + Send + Sync + 'static {
    /// The dtype of this Rust type.
    const DTYPE: DType;
    /// This value as an `f64` (for reference semantics and comparisons).
    fn to_f64(self) -> f64;
    /// The value nearest to `v` (saturating for integers).
    fn from_f64(v: f64) -> Self;
}

macro_rules! element {
    ($t:ty, $d:ident, $to:expr, $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn to_f64(self) -> f64 {
                let to: fn($t) -> f64 = $to;
                to(self)
            }
            fn from_f64(v: f64) -> Self {
                let from: fn(f64) -> $t = $from;
                from(v)
            }
        }
    };
}

element!(bool, Bool, |x| x as u8 as f64, |v| v != 0.0);
element!(i8, I8, |x| x as f64, |v| v as i8);
element!(i16, I16, |x| x as f64, |v| v as i16);
element!(i32, I32, |x| x as f64, |v| v as i32);
element!(i64, I64, |x| x as f64, |v| v as i64);
element!(u8, U8, |x| x as f64, |v| v as u8);
element!(u16, U16, |x| x as f64, |v| v as u16);
element!(u32, U32, |x| x as f64, |v| v as u32);
element!(u64, U64, |x| x as f64, |v| v as u64);
element!(half::f16, F16, |x| x.to_f64(), half::f16::from_f64);
// Through f32: `half`'s own f64 → bf16 conversion rounds some ties-adjacent
// values the wrong way, and XLA rounds from f32 anyway.
element!(half::bf16, BF16, |x| x.to_f64(), |v| half::bf16::from_f32(
    v as f32
));
element!(f32, F32, |x| x as f64, |v| v as f32);
element!(f64, F64, |x| x, |v| v);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_like_xla() {
        // Found by the random-graph test: 1.23828161 lies just above the
        // midpoint of 1.234375 and 1.2421875.
        let x = <half::bf16 as Element>::from_f64(-1.2382816076278687);
        assert_eq!(x.to_f64(), -1.2421875);
    }
}
