//! Element type changes: `convert` (by value) and `bitcast` (by bits).
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/convert.rs`.

use crate::ir::Op;
use crate::ir::ops::Conversion;
use crate::ir::ops::convert::bitcast_shape;
use crate::tensor::record;
use crate::{DType, Tensor};

impl Tensor {
    /// The values converted to `dtype` (`stablehlo.convert`): floats to
    /// integers truncate toward zero; anything to bool is `!= 0`.
    #[track_caller]
    pub fn convert(self, dtype: DType) -> Tensor {
        record(
            "convert",
            &[self],
            Ok((
                Op::Conversion(Conversion::Convert),
                self.shape().with_dtype(dtype),
            )),
        )
    }

    /// The bits reinterpreted as `dtype` (`stablehlo.bitcast_convert`). For
    /// a narrower `dtype` the result gains a trailing axis of the width
    /// ratio holding each element's pieces least significant first (so an
    /// f16 `[n]` becomes u8 `[n, 2]`); for a wider one the operand's last
    /// axis must be that ratio and is consumed (u8 `[n, 2]` to f16 `[n]`).
    #[track_caller]
    pub fn bitcast(self, dtype: DType) -> Tensor {
        let res =
            bitcast_shape(self.shape(), dtype).map(|s| (Op::Conversion(Conversion::Bitcast), s));
        record("bitcast", &[self], res)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{Tol, check, trace_fn};
    use crate::{DType, Literal, Shape};

    #[test]
    fn convert_and_bitcast() {
        let x = [Literal::from_slice(&[-1.75f32, 0.0, 2.5, 1.0], &[4])];
        check(
            &x,
            |x| x[0].convert(DType::I32),
            &[-1.0, 0.0, 2.0, 1.0],
            Tol::EXACT,
        );
        check(
            &x,
            |x| x[0].convert(DType::Bool),
            &[1.0, 0.0, 1.0, 1.0],
            Tol::EXACT,
        );
        check(
            &x,
            |x| x[0].convert(DType::BF16),
            &[-1.75, 0.0, 2.5, 1.0],
            Tol::EXACT,
        );
        check(
            &x,
            |x| x[0].convert(DType::F16).convert(DType::F64),
            &[-1.75, 0.0, 2.5, 1.0],
            Tol::EXACT,
        );
        // 1.0f32 is 0x3F800000 = 1065353216; -1.75 is 0xBFE00000.
        check(
            &x,
            |x| x[0].bitcast(DType::U32),
            &[3219128320.0, 0.0, 1075838976.0, 1065353216.0],
            Tol::EXACT,
        );
        check(
            &x,
            |x| x[0].bitcast(DType::I32).bitcast(DType::F32),
            &[-1.75, 0.0, 2.5, 1.0],
            Tol::EXACT,
        );
    }

    #[test]
    fn bitcast_changes_width_little_endian() {
        // u8 [n, 2] to f16 [n]: 1, -2, the smallest subnormal, the largest.
        let b16 = [Literal::from_slice(
            &[0x00u8, 0x3C, 0x00, 0xC0, 0x01, 0x00, 0xFF, 0x7B],
            &[4, 2],
        )];
        let h = check(
            &b16,
            |x| x[0].bitcast(DType::F16),
            &[1.0, -2.0, 2f64.powi(-24), 65504.0],
            Tol::EXACT,
        );
        assert_eq!(h.shape(), Shape::new(DType::F16, &[4]));
        // u8 [n, 4] to f32 [n] and back: -0.0 and a subnormal keep their bits.
        let f = [1.5f32, -0.0, f32::from_bits(1), f32::MAX, -2.5];
        let bytes: Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
        let b32 = [Literal::from_slice(&bytes, &[5, 4])];
        check(
            &b32,
            |x| x[0].bitcast(DType::F32),
            &f.map(f64::from),
            Tol::EXACT,
        );
        let want: Vec<f64> = bytes.iter().map(|&b| f64::from(b)).collect();
        let back = check(
            &b32,
            |x| x[0].bitcast(DType::F32).bitcast(DType::U8),
            &want,
            Tol::EXACT,
        );
        assert_eq!(back.shape(), Shape::new(DType::U8, &[5, 4]));
        // f32 [n] to u8 [n, 4], least significant byte first.
        let x = [Literal::from_slice(&[1.0f32, -2.5], &[2])];
        check(
            &x,
            |x| x[0].bitcast(DType::U8),
            &[0.0, 0.0, 128.0, 63.0, 0.0, 0.0, 32.0, 192.0],
            Tol::EXACT,
        );
        // i32 [n] to u16 [n, 2] keeps the tags of the axes it had.
        let w = [Literal::new(
            Shape::tagged(DType::I32, &[("n", 2)]),
            vec![f64::from(0x1234_5678), -2.0],
        )];
        let halves = check(
            &w,
            |x| x[0].bitcast(DType::U16),
            &[22136.0, 4660.0, 65534.0, 65535.0],
            Tol::EXACT,
        );
        assert_eq!(halves.shape().tag(0).map(|t| t.as_str()), Some("n"));
        assert_eq!(halves.shape().tag(1), None);
        let text = trace_fn(&b16, |x| x[0].bitcast(DType::F16))
            .unwrap()
            .stablehlo();
        assert!(
            text.contains(
                "\"stablehlo.bitcast_convert\"(%arg0) : (tensor<4x2xui8>) -> tensor<4xf16>"
            ),
            "{text}"
        );
    }
}
