//! Indexing: `dynamic_slice`, `dynamic_update_slice`, `gather` of slices
//! along an axis and `scatter` with an update body: the gather shape rule,
//! printing and reference semantics.

use super::reduce::apply;
use super::shape_ops::gather_by_index;
use crate::Function;
use crate::Shape;
use crate::literal::{Literal, strides, unravel};
use crate::print::{OpPrinter, i64_array, i64_list};
use crate::shape::AxisRef;
use std::sync::Arc;

/// The ops that read or write at computed positions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Indexing {
    /// `stablehlo.dynamic_slice` (operand, scalar starts...) with slice sizes.
    DynamicSlice(Vec<i64>),
    /// `stablehlo.dynamic_update_slice` (operand, update, scalar starts...).
    DynamicUpdateSlice,
    /// `stablehlo.gather` of slices along an axis (operand, indices).
    Gather(usize),
    /// `stablehlo.scatter` of slices along an axis (operand, indices,
    /// updates), combining old and new elements with `update`.
    Scatter {
        /// The operand's axis the indices pick along.
        axis: usize,
        /// Old and new element to the element kept, hermetic.
        update: Arc<Function>,
    },
}

/// The position of `axis` in `s` and the type of a gather of `s` along it
/// by indices of `indices`, or why there is none.
pub fn gathered_shape(s: Shape, axis: AxisRef, idx: Shape) -> Result<(usize, Shape), String> {
    let a = s
        .axis(axis)
        .ok_or_else(|| format!("no axis {axis} in {s}"))?;
    if !idx.dtype().is_integer() {
        return Err(format!("indices must be integers, not {}", idx.dtype()));
    }
    let mut out = s.remove_axis(a).ok_or("no axis")?;
    for k in 0..idx.rank() {
        out = out
            .insert_axis(a + k, idx.dims()[k], idx.tag(k).map_or("", |t| t.as_str()))
            .ok_or("rank above 8")?;
    }
    Ok((a, out))
}

/// The shape rules of the indexing ops: a `dynamic_slice` box within its
/// operand, an update within the tensor it is written to, one integer
/// scalar start per axis; a gather's result ([`gathered_shape`]), which a
/// scatter's updates must have, with a body over two scalars of the
/// operand's dtype.
fn infer_op(op: &Indexing, args: &[Shape]) -> Result<Shape, String> {
    let s = *args.first().ok_or("no operand")?;
    match op {
        Indexing::DynamicSlice(sizes) => {
            starts(s, &args[1..])?;
            if sizes.len() != s.rank() || sizes.iter().zip(s.dims()).any(|(&n, &d)| n < 0 || n > d)
            {
                return Err(format!("slice sizes {sizes:?} do not fit {s}"));
            }
            Ok(sizes
                .iter()
                .enumerate()
                .fold(s, |out, (i, &n)| super::shape_ops::resized(out, i, n)))
        }
        Indexing::DynamicUpdateSlice => {
            let u = *args.get(1).ok_or("no update")?;
            starts(s, &args[2..])?;
            if u.rank() != s.rank()
                || u.dtype() != s.dtype()
                || u.dims().iter().zip(s.dims()).any(|(a, b)| a > b)
            {
                return Err(format!("update {u} does not fit {s}"));
            }
            Ok(s)
        }
        Indexing::Gather(a) => {
            super::arity(args, 2)?;
            gathered_shape(s, (*a).into(), args[1]).map(|(_, out)| out)
        }
        Indexing::Scatter { axis, update } => {
            super::arity(args, 3)?;
            let (_, want) = gathered_shape(s, (*axis).into(), args[1])?;
            let updates = args[2];
            if want.dims() != updates.dims() || updates.dtype() != s.dtype() {
                return Err(format!("updates {updates} should be shaped {want}"));
            }
            let scalar = Shape::scalar(s.dtype());
            super::signature(update, "update body", &[scalar, scalar], &[scalar])?;
            Ok(s)
        }
    }
}

/// That `starts` are one integer scalar of one dtype per axis of `s`.
pub fn starts(s: Shape, starts: &[Shape]) -> Result<(), String> {
    if starts.len() != s.rank() {
        return Err(format!("{} starts for {s}", starts.len()));
    }
    let t0 = starts.first().map(|t| t.dtype());
    if starts
        .iter()
        .any(|t| t.rank() != 0 || !t.dtype().is_integer() || Some(t.dtype()) != t0)
    {
        return Err("starts must be integer scalars of one dtype".into());
    }
    Ok(())
}

/// `offset_dims`/`update_window_dims` of a gather or scatter along `a`.
fn window_dims(rank: usize, a: usize, idx_rank: usize) -> Vec<i64> {
    (0..a)
        .chain(a + idx_rank..rank - 1 + idx_rank)
        .map(|d| d as i64)
        .collect()
}

fn print_op(op: &Indexing, p: &mut OpPrinter<'_>) {
    let shapes = p.arg_shapes().to_vec();
    match op {
        Indexing::DynamicSlice(sizes) => p.generic(
            "stablehlo.dynamic_slice",
            &format!("slice_sizes = {}", i64_array(sizes.iter().copied())),
        ),
        Indexing::DynamicUpdateSlice => p.generic("stablehlo.dynamic_update_slice", ""),
        Indexing::Gather(a) => {
            let (s, i) = (shapes[0], shapes[1]);
            let win = window_dims(s.rank(), *a, i.rank());
            let offset = if win.is_empty() {
                String::new()
            } else {
                format!("offset_dims = {}, ", i64_list(win))
            };
            let sizes = s
                .dims()
                .iter()
                .enumerate()
                .map(|(k, &d)| if k == *a { 1 } else { d });
            let attrs = format!(
                "dimension_numbers = #stablehlo.gather<{offset}collapsed_slice_dims = [{a}], start_index_map = [{a}], index_vector_dim = {}>, slice_sizes = {}, indices_are_sorted = false",
                i.rank(),
                i64_array(sizes)
            );
            p.generic("stablehlo.gather", &attrs)
        }
        Indexing::Scatter {
            axis: a,
            update: body,
        } => {
            let (s, i) = (shapes[0], shapes[1]);
            let win = window_dims(s.rank(), *a, i.rank());
            let update = if win.is_empty() {
                String::new()
            } else {
                format!("update_window_dims = {}, ", i64_list(win))
            };
            let attrs = format!(
                "scatter_dimension_numbers = #stablehlo.scatter<{update}inserted_window_dims = [{a}], scatter_dims_to_operand_dims = [{a}], index_vector_dim = {}>, indices_are_sorted = false, unique_indices = false",
                i.rank()
            );
            let region = p.region(0, body, 2, &[]);
            p.generic_with("stablehlo.scatter", &region, &attrs)
        }
    }
}

fn eval_op(op: &Indexing, args: &[&Literal], shape: Shape) -> Literal {
    let x = args[0];
    let xs = x.shape();
    let st = strides(xs.dims());
    let off = |ii: &[usize]| ii.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>();
    match op {
        Indexing::DynamicSlice(sizes) => {
            let starts: Vec<usize> = (0..xs.rank())
                .map(|k| (args[1 + k].data()[0] as i64).clamp(0, xs.dims()[k] - sizes[k]) as usize)
                .collect();
            gather_by_index(shape, |oi| {
                let ii: Vec<usize> = oi.iter().zip(&starts).map(|(a, b)| a + b).collect();
                x.data()[off(&ii)]
            })
        }
        Indexing::DynamicUpdateSlice => {
            let u = args[1];
            let us = u.shape();
            let starts: Vec<usize> = (0..xs.rank())
                .map(|k| {
                    (args[2 + k].data()[0] as i64).clamp(0, xs.dims()[k] - us.dims()[k]) as usize
                })
                .collect();
            let mut data = x.data().to_vec();
            for (j, &v) in u.data().iter().enumerate() {
                let ui = unravel(j, us.dims());
                let ii: Vec<usize> = ui.iter().zip(&starts).map(|(a, b)| a + b).collect();
                data[off(&ii)] = v;
            }
            Literal::new(shape, data)
        }
        Indexing::Gather(a) => {
            let idx = args[1];
            let ir = idx.shape().rank();
            let ist = strides(idx.shape().dims());
            gather_by_index(shape, |oi| {
                let io: usize = (0..ir).map(|k| oi[a + k] * ist[k]).sum();
                let pos = (idx.data()[io] as i64).clamp(0, xs.dims()[*a] - 1) as usize;
                let ii: Vec<usize> = oi[..*a]
                    .iter()
                    .copied()
                    .chain([pos])
                    .chain(oi[a + ir..].iter().copied())
                    .collect();
                x.data()[off(&ii)]
            })
        }
        Indexing::Scatter { axis: a, update } => {
            let (idx, upd) = (args[1], args[2]);
            let ir = idx.shape().rank();
            let ist = strides(idx.shape().dims());
            let mut data = x.data().to_vec();
            for (j, &v) in upd.data().iter().enumerate() {
                let ui = unravel(j, upd.shape().dims());
                let io: usize = (0..ir).map(|k| ui[a + k] * ist[k]).sum();
                let pos = idx.data()[io] as i64;
                if pos < 0 || pos >= xs.dims()[*a] {
                    continue;
                }
                let ii: Vec<usize> = ui[..*a]
                    .iter()
                    .copied()
                    .chain([pos as usize])
                    .chain(ui[a + ir..].iter().copied())
                    .collect();
                let o = off(&ii);
                data[o] = apply(update, &[data[o], v])[0];
            }
            Literal::new(shape, data)
        }
    }
}

impl super::Family for Indexing {
    fn name(&self) -> &'static str {
        match self {
            Indexing::DynamicSlice(_) => "dynamic_slice",
            Indexing::DynamicUpdateSlice => "dynamic_update_slice",
            Indexing::Gather(_) => "gather",
            Indexing::Scatter { .. } => "scatter",
        }
    }

    fn infer(&self, args: &[Shape], _: Shape) -> Result<super::Shapes, String> {
        infer_op(self, args).map(|s| vec![s])
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        print_op(self, p)
    }

    fn eval(&self, args: &[&Literal], shape: Shape) -> Vec<Literal> {
        vec![eval_op(self, args, shape)]
    }
}
