//! Element type changes, `stablehlo.convert` (by value) and
//! `stablehlo.bitcast_convert` (by bits): printing and reference semantics.

use crate::Shape;
use crate::ir::Op;
use crate::ir::print::OpPrinter;
use crate::literal::{Literal, decode, encode};

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
