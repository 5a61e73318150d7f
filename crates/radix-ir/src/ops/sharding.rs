//! Sharding constraints, which tell XLA's partitioner how a value inside
//! the function is split over the devices of the mesh: printed as
//! `sdy.sharding_constraint` (Shardy) or as `stablehlo.custom_call
//! @Sharding` with an `mhlo.sharding` attribute (GSPMD); reference semantics
//! (the identity).

use crate::Shape;
use crate::literal::Literal;
use crate::print::OpPrinter;
use crate::sharding::Partitioner;

/// A sharding constraint on the operand: `sdy.sharding_constraint` under
/// Shardy with a mesh, else `stablehlo.custom_call @Sharding`.
pub fn print(p: &mut OpPrinter<'_>) {
    let shape = p.shape();
    // A mesh the sharding does not fit is `Program::with_mesh`'s error,
    // reported before printing; without a mesh the value is whole.
    match p.partitioning() {
        (Partitioner::Shardy, Some(mesh)) => {
            let sharding = mesh.sdy_sharding_of(&shape).unwrap_or_default();
            p.generic("sdy.sharding_constraint", &format!("sharding = {sharding}"));
        }
        (partitioner, mesh) => {
            debug_assert!(partitioner == Partitioner::Gspmd || mesh.is_none());
            let sharding = mesh
                .and_then(|m| m.sharding_of(&shape).ok())
                .unwrap_or_else(|| "{replicated}".into());
            p.generic(
                "stablehlo.custom_call",
                &format!("call_target_name = \"Sharding\", mhlo.sharding = \"{sharding}\""),
            );
        }
    }
}

/// The operand itself: a sharding constraint moves no value.
pub fn eval(args: &[&Literal], shape: Shape) -> Literal {
    Literal::new(shape, args[0].data().to_vec())
}
