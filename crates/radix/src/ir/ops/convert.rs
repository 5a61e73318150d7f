//! Element type changes: `convert` (by value) and `bitcast` (by bits).

use crate::ir::Op;
use crate::ir::print::OpPrinter;
use crate::literal::{Literal, decode, encode};
use crate::tensor::record;
use crate::{DType, Shape, Tensor};

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

pub(crate) fn print(op: &Op, p: &mut OpPrinter<'_>) {
    match op {
        Op::Convert => p.generic("stablehlo.convert", ""),
        Op::Bitcast => p.generic("stablehlo.bitcast_convert", ""),
        _ => unreachable!(),
    }
}

pub(crate) fn eval(op: &Op, args: &[&Literal], shape: Shape) -> Literal {
    match op {
        Op::Convert => Literal::new(shape, args[0].data().to_vec()),
        Op::Bitcast => {
            let bytes = encode(args[0].shape().dtype(), args[0].data());
            Literal::new(shape, decode(shape.dtype(), &bytes))
        }
        _ => unreachable!(),
    }
}
