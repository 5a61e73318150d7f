//! Indexing: `dynamic_slice` and `dynamic_update_slice` at run-time offsets,
//! `gather` of slices along an axis (embedding lookup), `scatter` of slices
//! with an update function (a hermetic block over scalars: override, add).

use std::sync::Arc;

use crate::ir::Op;
use crate::ir::print::{OpPrinter, i64_array, i64_list};
use crate::literal::{Literal, strides, unravel};
use crate::shape::AxisRef;
use crate::tensor::record;
use crate::{Shape, Tensor};

use super::reduce::{apply, check_body, scalar_block};
use super::shape_ops::gather_by_index;

impl Tensor {
    /// A box of sizes `sizes` starting at `starts` (one integer scalar tensor
    /// per axis); starts are clamped so the box fits (`stablehlo.dynamic_slice`).
    #[track_caller]
    pub fn dynamic_slice(self, starts: &[Tensor], sizes: &[i64]) -> Tensor {
        let s = self.shape();
        let mut args = vec![self];
        args.extend_from_slice(starts);
        let res = check_starts(s, starts).and_then(|()| {
            if sizes.len() != s.rank() || sizes.iter().zip(s.dims()).any(|(&n, &d)| n < 0 || n > d)
            {
                return Err(format!("slice sizes {sizes:?} do not fit {s}"));
            }
            let mut out = s;
            for (i, &n) in sizes.iter().enumerate() {
                out = out
                    .remove_axis(i)
                    .and_then(|o| o.insert_axis(i, n, s.tag(i).map_or("", |t| t.as_str())))
                    .unwrap_or(out);
            }
            Ok((Op::DynamicSlice(sizes.to_vec()), out))
        });
        record("dynamic_slice", &args, res)
    }

    /// `self` with `update` written at `starts` (clamped so it fits)
    /// (`stablehlo.dynamic_update_slice`).
    #[track_caller]
    pub fn dynamic_update_slice(self, update: Tensor, starts: &[Tensor]) -> Tensor {
        let (s, u) = (self.shape(), update.shape());
        let mut args = vec![self, update];
        args.extend_from_slice(starts);
        let res = check_starts(s, starts).and_then(|()| {
            if u.rank() != s.rank()
                || u.dtype() != s.dtype()
                || u.dims().iter().zip(s.dims()).any(|(a, b)| a > b)
            {
                return Err(format!("update {u} does not fit {s}"));
            }
            Ok((Op::DynamicUpdateSlice, s))
        });
        record("dynamic_update_slice", &args, res)
    }

    /// Slices of `self` along `axis` picked by integer `indices`: the result
    /// has `self`'s axes with `axis` replaced by the axes of `indices`
    /// (embedding lookup: `table.gather("voc", ids)`); indices are clamped
    /// (`stablehlo.gather`).
    #[track_caller]
    pub fn gather(self, axis: impl Into<AxisRef>, indices: Tensor) -> Tensor {
        let s = self.shape();
        let axis = axis.into();
        let res = gathered_shape(s, axis, indices.shape()).map(|(a, out)| (Op::Gather(a), out));
        record("gather", &[self, indices], res)
    }

    /// `self` with the slices along `axis` at `indices` replaced by `updates`
    /// (shaped as `self.gather(axis, indices)`); out-of-range indices are
    /// skipped, and which update wins at a repeated index is unspecified
    /// (`stablehlo.scatter` returning the update).
    #[track_caller]
    pub fn scatter(self, axis: impl Into<AxisRef>, indices: Tensor, updates: Tensor) -> Tensor {
        self.scatter_with(axis, indices, updates, |_, new| new)
    }

    /// `self` with `updates` added to the slices along `axis` at `indices`;
    /// updates at a repeated index accumulate (`stablehlo.scatter` with `add`).
    #[track_caller]
    pub fn scatter_add(self, axis: impl Into<AxisRef>, indices: Tensor, updates: Tensor) -> Tensor {
        self.scatter_with(axis, indices, updates, |old, new| old + new)
    }

    /// `self` with each element `old` of the slices along `axis` at
    /// `indices` replaced by `update(old, new)`, `new` from `updates`
    /// (shaped as `self.gather(axis, indices)`); out-of-range indices are
    /// skipped (`stablehlo.scatter`). `update` is a hermetic block over
    /// scalars; at a repeated index it is applied once per update, in an
    /// unspecified order.
    #[track_caller]
    pub fn scatter_with(
        self,
        axis: impl Into<AxisRef>,
        indices: Tensor,
        updates: Tensor,
        update: impl FnOnce(Tensor, Tensor) -> Tensor,
    ) -> Tensor {
        let s = self.shape();
        let axis = axis.into();
        let block = scalar_block("scatter update", &[s.dtype()], 2, |x| {
            vec![update(x[0], x[1])]
        });
        let res = gathered_shape(s, axis, indices.shape()).and_then(|(a, want)| {
            if want.dims() != updates.shape().dims() || updates.dtype() != s.dtype() {
                return Err(format!(
                    "updates {} should be shaped {want}",
                    updates.shape()
                ));
            }
            check_body(&block, &[s.dtype()])?;
            let op = Op::Scatter {
                axis: a,
                update: Arc::new(block.function),
            };
            Ok((op, s))
        });
        record("scatter", &[self, indices, updates], res)
    }
}

fn check_starts(s: Shape, starts: &[Tensor]) -> Result<(), String> {
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

fn gathered_shape(s: Shape, axis: AxisRef, idx: Shape) -> Result<(usize, Shape), String> {
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

/// `offset_dims`/`update_window_dims` of a gather or scatter along `a`.
fn window_dims(rank: usize, a: usize, idx_rank: usize) -> Vec<i64> {
    (0..a)
        .chain(a + idx_rank..rank - 1 + idx_rank)
        .map(|d| d as i64)
        .collect()
}

pub(crate) fn print(op: &Op, p: &mut OpPrinter<'_>) {
    let shapes = p.arg_shapes().to_vec();
    match op {
        Op::DynamicSlice(sizes) => p.generic(
            "stablehlo.dynamic_slice",
            &format!("slice_sizes = {}", i64_array(sizes.iter().copied())),
        ),
        Op::DynamicUpdateSlice => p.generic("stablehlo.dynamic_update_slice", ""),
        Op::Gather(a) => {
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
        Op::Scatter {
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
        _ => unreachable!(),
    }
}

pub(crate) fn eval(op: &Op, args: &[&Literal], shape: Shape) -> Literal {
    let x = args[0];
    let xs = x.shape();
    let st = strides(xs.dims());
    let off = |ii: &[usize]| ii.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>();
    match op {
        Op::DynamicSlice(sizes) => {
            let starts: Vec<usize> = (0..xs.rank())
                .map(|k| (args[1 + k].data()[0] as i64).clamp(0, xs.dims()[k] - sizes[k]) as usize)
                .collect();
            gather_by_index(shape, |oi| {
                let ii: Vec<usize> = oi.iter().zip(&starts).map(|(a, b)| a + b).collect();
                x.data()[off(&ii)]
            })
        }
        Op::DynamicUpdateSlice => {
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
        Op::Gather(a) => {
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
        Op::Scatter { axis: a, update } => {
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
        _ => unreachable!(),
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{Tol, check};
    use crate::{DType, Literal, Shape, Tensor};

    fn table() -> Literal {
        Literal::new(
            Shape::tagged(DType::F32, &[("voc", 4), ("d", 2)]),
            vec![0., 1., 10., 11., 20., 21., 30., 31.],
        )
    }

    #[test]
    fn embedding_lookup_gather() {
        let ids = Literal::new(Shape::tagged(DType::I32, &[("s", 3)]), vec![2., 0., 3.]);
        let r = check(
            &[table(), ids],
            |x| x[0].gather("voc", x[1]),
            &[20., 21., 0., 1., 30., 31.],
            Tol::EXACT,
        );
        assert_eq!(r.shape(), Shape::tagged(DType::F32, &[("s", 3), ("d", 2)]));
        let cols = Literal::from_slice(&[1i64, 1, 0], &[3]);
        check(
            &[table(), cols],
            |x| x[0].gather("d", x[1]),
            &[1., 1., 0., 11., 11., 10., 21., 21., 20., 31., 31., 30.],
            Tol::EXACT,
        );
    }

    #[test]
    fn scatter_slices() {
        let ids = Literal::from_slice(&[3i32, 1], &[2]);
        let upd = Literal::new(Shape::new(DType::F32, &[2, 2]), vec![-1., -2., -3., -4.]);
        check(
            &[table(), ids, upd],
            |x| x[0].scatter("voc", x[1], x[2]),
            &[0., 1., -3., -4., 20., 21., -1., -2.],
            Tol::EXACT,
        );
    }

    #[test]
    fn dynamic_slices_clamp() {
        let at = |i: f64| Tensor::scalar(i, DType::I32);
        check(
            &[table()],
            |x| x[0].dynamic_slice(&[at(1.0), at(1.0)], &[2, 1]),
            &[11., 21.],
            Tol::EXACT,
        );
        check(
            &[table()],
            |x| x[0].dynamic_slice(&[at(3.0), at(0.0)], &[2, 2]),
            &[20., 21., 30., 31.],
            Tol::EXACT,
        );
        let upd = Literal::new(Shape::new(DType::F32, &[1, 2]), vec![7., 8.]);
        check(
            &[table(), upd],
            |x| x[0].dynamic_update_slice(x[1], &[at(2.0), at(0.0)]),
            &[0., 1., 10., 11., 7., 8., 30., 31.],
            Tol::EXACT,
        );
    }
}
