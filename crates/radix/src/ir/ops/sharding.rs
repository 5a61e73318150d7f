//! Sharding constraints: `stablehlo.custom_call @Sharding` with an
//! `mhlo.sharding` attribute, which tells XLA's SPMD partitioner how a value
//! inside the function is split over the devices of the mesh.

use crate::ir::Op;
use crate::ir::print::OpPrinter;
use crate::literal::Literal;
use crate::shape::AxisRef;
use crate::tensor::record;
use crate::{Shape, Tensor};

impl Tensor {
    /// The same values, constrained to be split along `axis` over mesh axis
    /// `mesh_axis` (`stablehlo.custom_call @Sharding`); the other axes keep
    /// the sharding of this tensor's shape. Use it inside a traced function;
    /// mark arguments with [`crate::Shape::shard`] instead. Whether the size
    /// divides is checked against the mesh at compile time.
    #[track_caller]
    pub fn shard(self, axis: impl Into<AxisRef>, mesh_axis: usize) -> Tensor {
        let axis = axis.into();
        let res = match self.shape().shard(axis, mesh_axis) {
            Some(s) => Ok((Op::Sharding, s)),
            None => Err(format!(
                "no axis {axis} in {} (or a mesh axis past 255)",
                self.shape()
            )),
        };
        record("shard", &[self], res)
    }

    /// The same values, constrained to be whole on every device
    /// (`stablehlo.custom_call @Sharding` with `{replicated}`).
    #[track_caller]
    pub fn replicate(self) -> Tensor {
        record(
            "replicate",
            &[self],
            Ok((Op::Sharding, self.shape().unsharded())),
        )
    }
}

pub(crate) fn print(p: &mut OpPrinter<'_>) {
    let sharding = p.sharding(&p.shape());
    p.generic(
        "stablehlo.custom_call",
        &format!("call_target_name = \"Sharding\", mhlo.sharding = \"{sharding}\""),
    );
}

pub(crate) fn eval(args: &[&Literal], shape: Shape) -> Literal {
    Literal::new(shape, args[0].data().to_vec())
}
