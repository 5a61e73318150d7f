//! Custom calls of Rust kernels (`stablehlo.custom_call` with
//! `api_version = 4`): the call site, its shape checks, its printing, and
//! its reference semantics, which run the kernel itself on host literals.
//! The declaration API is [`crate::custom_call`].
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/custom_call.rs`.

use crate::custom_call::{Attrs, CustomCall};
use crate::ir::Op;
use crate::ir::ops::custom_call::*;
use crate::tensor::control::{multi, poison};
use crate::tensor::{located, trace_hermetic_block};
use crate::{Shape, Tensor};
use std::panic::Location;
use std::sync::Arc;

/// Records `call(operands)` with `attrs` (see [`CustomCall::call`]).
#[track_caller]
pub(crate) fn emit(call: &CustomCall, operands: &[Tensor], attrs: &Attrs) -> Vec<Tensor> {
    let shapes: Vec<Shape> = operands.iter().map(|t| t.shape()).collect();
    let fail = |msg: String, n: usize| {
        let at = shapes
            .first()
            .copied()
            .unwrap_or(Shape::scalar(crate::DType::F32));
        poison(
            "custom_call",
            format!("{}: {msg}", call.name()),
            operands,
            &vec![at; n.max(1)],
        )
    };
    if let Err(msg) = attrs.check() {
        return fail(msg, 1);
    }
    let results = match (call.shape_rule())(&shapes, attrs) {
        Ok(r) if r.is_empty() => return fail("the shape rule gives no result".into(), 1),
        Ok(r) => r,
        Err(msg) => return fail(msg, 1),
    };
    for &(out, operand) in call.aliases() {
        let same = match (results.get(out), shapes.get(operand)) {
            (Some(r), Some(o)) => r.dims() == o.dims() && r.dtype() == o.dtype(),
            _ => false,
        };
        if !same {
            return fail(
                format!("output {out} cannot live in operand {operand}'s buffer"),
                results.len(),
            );
        }
    }
    let fallback = match call.fallback() {
        None => None,
        Some(f) => {
            // Radix's own fallbacks are at the user's line too.
            let block = located(Location::caller(), || {
                trace_hermetic_block("custom call fallback", &shapes, |args| f(args, attrs))
            });
            let got: Vec<(Vec<i64>, crate::DType)> = block
                .results
                .iter()
                .map(|t| (t.dims(), t.dtype()))
                .collect();
            let want: Vec<(Vec<i64>, crate::DType)> = results
                .iter()
                .map(|s| (s.dims().to_vec(), s.dtype()))
                .collect();
            if got != want {
                return fail(
                    format!("the fallback gives {got:?}, the shape rule {want:?}"),
                    results.len(),
                );
            }
            Some(Arc::new(block.function))
        }
    };
    let site = Site {
        call: Arc::new(call.clone()),
        attrs: attrs.clone(),
        results: results.clone(),
        fallback,
    };
    multi(Op::CustomCall(Arc::new(site)), operands, &results)
}
