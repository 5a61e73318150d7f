//! The derivative rule of a custom call: the derivative it declares
//! ([`CustomCallBuilder::derivative`](crate::custom_call::CustomCallBuilder::derivative)),
//! user code written with `Tensor` methods as the built-in rules are, run
//! on the call's operands, results and their cotangents.

use crate::Tensor;
use crate::autodiff::Rule;
use crate::custom_call::declaration;
use crate::ir::ops::custom_call::Site;
use crate::tensor::control::project_from;

pub(super) fn vjp(site: &Site, args: &[Tensor], out: Tensor, cts: &[Option<Tensor>]) -> Rule {
    let Some(d) = declaration(site).derivative() else {
        return Err(format!(
            "no derivative rule for the custom call {}: declare one with `.derivative(...)`",
            site.call.name()
        ));
    };
    let results = project_from(out, 0, &site.results);
    let cts: Vec<Tensor> = (cts.iter().zip(&site.results))
        .map(|(ct, &s)| ct.map_or_else(|| Tensor::zeros(s), |ct| ct.retag(s)))
        .collect();
    let got = d(args, &results, &cts, &site.attrs);
    let dims = |ts: &[Tensor]| -> Vec<Vec<i64>> { ts.iter().map(|t| t.dims()).collect() };
    if dims(&got) != dims(args) {
        return Err(format!(
            "the derivative of {} gives {:?}, not one cotangent per operand {:?}",
            site.call.name(),
            dims(&got),
            dims(args)
        ));
    }
    Ok(got.into_iter().map(Some).collect())
}
