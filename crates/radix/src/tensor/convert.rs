//! Element type changes: `convert` (by value) and `bitcast` (by bits).
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/convert.rs`.

use crate::ir::Op;
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
            Ok((Op::Convert, self.shape().with_dtype(dtype))),
        )
    }

    /// The bits reinterpreted as `dtype` of the same width (`stablehlo.bitcast_convert`).
    #[track_caller]
    pub fn bitcast(self, dtype: DType) -> Tensor {
        let res = if dtype.size_in_bytes() == self.dtype().size_in_bytes()
            && (dtype == DType::Bool) == (self.dtype() == DType::Bool)
        {
            Ok((Op::Bitcast, self.shape().with_dtype(dtype)))
        } else {
            Err(format!("{} and {dtype} differ in width", self.dtype()))
        };
        record("bitcast", &[self], res)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{Tol, check};
    use crate::{DType, Literal};

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
}
