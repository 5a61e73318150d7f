//! Sharding constraints, which tell XLA's partitioner how a value inside
//! the function is split over the devices of the mesh (printed as Shardy's
//! `sdy.sharding_constraint` or GSPMD's `@Sharding` custom call).
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/sharding.rs`.

use crate::Tensor;
use crate::ir::Op;
use crate::shape::AxisRef;
use crate::tensor::record;

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
