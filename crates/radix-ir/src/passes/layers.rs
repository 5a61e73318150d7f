//! Layers of a stack read in place by custom calls.
//!
//! A program whose layers are one loop body over stacked weights (and a
//! stacked key/value cache) takes layer `i` of a stack as
//! `reshape(dynamic_slice(stack, i, 0, ..., 0))`: a slice as large as one
//! layer, which XLA copies into a buffer of its own before a custom call
//! can read it (~3.5 MB per layer of a small model's matrices, every step).
//! [`fold`] gives the call the stack and `i` instead, and the kernel's
//! handler (radix's `custom_call.rs`) and the interpreter ([`eval`](super::super::ops::custom_call::eval))
//! read layer `i` where it lies. The call's attribute [`LAYERS_ATTR`]
//! lists the operands that are stacks; their indices (rank-0 integers)
//! follow the call's other operands in the same order. An index is clamped
//! into the stack, as `dynamic_slice` clamps it.
//!
//! Only where the kernels run: a call replaced by its fallback keeps its
//! slices, so the fallback sees the operands it was traced for. An
//! operand that an output lives in (an alias) is not folded: the output
//! is the operand's size.

use crate::literal::Literal;
use crate::ops::custom_call::Site;
use crate::ops::{Indexing, Movement, Op, Source};
use crate::{DType, Function, Node, ValueId};
use radix_io::attr::{AttrValue, Attrs};
use std::sync::Arc;

/// The attribute of a custom call that lists (as `i64`s) the operands
/// that are stacks read one layer each.
pub const LAYERS_ATTR: &str = "radix.layers";

/// `f` with every custom call operand that is one layer of a stack read
/// in place ([`fold`]'s module doc), in nested bodies too; `None` where
/// no operand is.
pub fn fold(f: &Function) -> Option<Function> {
    let mut changed = false;
    let mut out = Function::default();
    let mut renamed: Vec<ValueId> = Vec::with_capacity(f.nodes.len());
    for (node, &loc) in f.nodes.iter().zip(&f.locs) {
        let mut node = node.clone();
        if !node.op.bodies().is_empty() {
            let folded = node
                .op
                .map_bodies(&|b: &Function| fold(b).unwrap_or_else(|| b.clone()));
            changed |= folded != node.op;
            node.op = folded;
        }
        for a in &mut node.args {
            *a = renamed[a.0 as usize];
        }
        if let Op::CustomCall(site) = &node.op
            && let Some((site, args)) = fold_call(&out, site, &node.args)
        {
            node.op = Op::CustomCall(Arc::new(site));
            node.args = args;
            changed = true;
        }
        renamed.push(out.push_rebuilt(node, loc));
    }
    if !changed {
        return None;
    }
    out.params = f.params.iter().map(|p| renamed[p.0 as usize]).collect();
    out.results = f.results.iter().map(|r| renamed[r.0 as usize]).collect();
    out.reuses = (f.reuses.iter())
        .map(|&(v, p)| (renamed[v.0 as usize], p))
        .collect();
    // The slices no call reads any more go.
    Some(super::dce::run(&out))
}

/// The site and operands of a call of `site` on `args` (values of `f`)
/// with its layer operands folded, or `None` where none is one.
fn fold_call(f: &Function, site: &Site, args: &[ValueId]) -> Option<(Site, Vec<ValueId>)> {
    if site.attrs.get(LAYERS_ATTR).is_some() {
        return None;
    }
    let aliased: Vec<usize> = site.call.aliases().iter().map(|a| a.1).collect();
    let mut stacked = vec![];
    let mut operands = args.to_vec();
    let mut indices = vec![];
    for (k, &a) in args.iter().enumerate() {
        if aliased.contains(&k) {
            continue;
        }
        if let Some((stack, index)) = layer_of(f, a) {
            operands[k] = stack;
            indices.push(index);
            stacked.push(k as i64);
        }
    }
    if stacked.is_empty() {
        return None;
    }
    operands.extend(indices);
    let attrs = site
        .attrs
        .clone()
        .with(LAYERS_ATTR, AttrValue::I64s(stacked));
    let site = Site {
        call: site.call.clone(),
        attrs,
        results: site.results.clone(),
        fallback: site.fallback.clone(),
    };
    Some((site, operands))
}

/// `(stack, i)` where `v` is `reshape(dynamic_slice(stack, i, 0, ..., 0))`
/// of one whole layer of `stack`, its leading axis dropped.
fn layer_of(f: &Function, v: ValueId) -> Option<(ValueId, ValueId)> {
    let reshape = f.node(v);
    let (Op::Movement(Movement::Reshape), [sliced]) = (&reshape.op, reshape.args.as_slice()) else {
        return None;
    };
    let slice = f.node(*sliced);
    let Op::Indexing(Indexing::DynamicSlice(sizes)) = &slice.op else {
        return None;
    };
    let (stack, starts) = slice.args.split_first()?;
    let whole = f.node(*stack).shape;
    let (lead, rest) = whole.dims().split_first()?;
    let one_layer = *lead > 0
        && sizes.first() == Some(&1)
        && sizes[1..] == *rest
        && reshape.shape.dims() == rest;
    let zeros = starts[1..].iter().all(|&s| is_zero(f.node(s)));
    // The handler reads the index as an i32 or an i64.
    let index = f.node(*starts.first()?).shape;
    let readable = index.rank() == 0 && matches!(index.dtype(), DType::I32 | DType::I64);
    (one_layer && zeros && readable).then_some((*stack, starts[0]))
}

/// Whether `node` is a constant zero.
fn is_zero(node: &Node) -> bool {
    matches!(&node.op, Op::Source(Source::Constant(bytes)) if bytes.iter().all(|&b| b == 0))
}

/// The operands a kernel reads for a call with `attrs` on `args`: each
/// stack ([`LAYERS_ATTR`]) replaced by its layer at its index (clamped),
/// the indices dropped; and `attrs` without [`LAYERS_ATTR`]. `Err` names
/// what does not fit.
pub fn layers_read<'a>(
    attrs: &Attrs,
    args: &[&'a Literal],
) -> Result<(Attrs, Vec<std::borrow::Cow<'a, Literal>>), String> {
    let stacked = stacked_operands(attrs.get(LAYERS_ATTR), args.len())?;
    let n = args.len() - stacked.len();
    let mut read: Vec<std::borrow::Cow<'a, Literal>> = args[..n]
        .iter()
        .map(|&a| std::borrow::Cow::Borrowed(a))
        .collect();
    for (j, &k) in stacked.iter().enumerate() {
        let (stack, index) = (args[k], args[n + j]);
        let layers = stack.shape().dims()[0];
        let at = layer_index(index.data().first().map(|&i| i as i64), layers)?;
        let layer = stack
            .shape()
            .remove_axis(0)
            .ok_or("a stack has a leading axis")?;
        let len = layer.count();
        let data = stack.data()[at * len..(at + 1) * len].to_vec();
        read[k] = std::borrow::Cow::Owned(Literal::new(layer, data));
    }
    Ok((without_layers(attrs), read))
}

/// The operands that `layers`, a call's [`LAYERS_ATTR`] if it has one,
/// lists for a call of `n_args` operands (in order, each before the
/// indices), or why the list does not fit.
pub fn stacked_operands(layers: Option<&AttrValue>, n_args: usize) -> Result<Vec<usize>, String> {
    let stacked = match layers {
        None => return Ok(vec![]),
        Some(AttrValue::I64s(ks)) => ks,
        Some(v) => return Err(format!("{LAYERS_ATTR} is {v:?}, not i64s")),
    };
    let n = n_args.checked_sub(stacked.len()).ok_or_else(|| {
        format!(
            "{LAYERS_ATTR} lists {} stacks of {n_args} operands",
            stacked.len()
        )
    })?;
    (stacked.iter())
        .map(|&k| match usize::try_from(k) {
            Ok(k) if k < n => Ok(k),
            _ => Err(format!("{LAYERS_ATTR} names operand {k} of {n}")),
        })
        .collect()
}

/// The layer an index `i` reads of a stack of `layers`: clamped into it,
/// as `dynamic_slice` clamps its starts. `Err` for a stack of no layers
/// or no index.
pub fn layer_index(i: Option<i64>, layers: i64) -> Result<usize, String> {
    match i {
        Some(i) if layers > 0 => Ok(i.clamp(0, layers - 1) as usize),
        Some(_) => Err("a stack of no layers".into()),
        None => Err("a layer index that is no scalar".into()),
    }
}

/// `attrs` without [`LAYERS_ATTR`]: what the kernel sees.
pub fn without_layers(attrs: &Attrs) -> Attrs {
    let mut out = Attrs::new();
    for (k, v) in attrs.entries() {
        if k != LAYERS_ATTR {
            out = out.with(k, v.clone());
        }
    }
    out
}
