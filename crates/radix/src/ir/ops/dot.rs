//! Contractions: `dot_general` (positional batch and contracting axes),
//! `dot` by tags, and `matmul`.

use crate::ir::Op;
use crate::ir::print::{OpPrinter, i64_list};
use crate::literal::{Literal, round_to, strides, unravel};
use crate::shape::{Axes, Tag};
use crate::tensor::record;
use crate::{Shape, Tensor};

/// The axes of a `dot_general`: batch axes pair up, contracting axes are summed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DotDims {
    /// Batch axes of the left operand.
    pub lhs_batch: Vec<usize>,
    /// Batch axes of the right operand.
    pub rhs_batch: Vec<usize>,
    /// Contracting axes of the left operand.
    pub lhs_contract: Vec<usize>,
    /// Contracting axes of the right operand.
    pub rhs_contract: Vec<usize>,
}

impl Tensor {
    /// The general contraction (`stablehlo.dot_general`): the result has the
    /// batch axes (tags from the left), then the left's free axes, then the right's.
    #[track_caller]
    pub fn dot_general(self, rhs: Tensor, dims: DotDims) -> Tensor {
        let res = dot_shape(self.shape(), rhs.shape(), &dims).map(|s| (Op::DotGeneral(dims), s));
        record("dot_general", &[self, rhs], res)
    }

    /// Contracts the axes tagged `axes` (present in both operands); the other
    /// tags the operands share become batch axes (`stablehlo.dot_general`).
    #[track_caller]
    pub fn dot(self, rhs: Tensor, axes: impl Axes) -> Tensor {
        let res = dot_by_tags(self.shape(), rhs.shape(), &axes).and_then(|dims| {
            let s = dot_shape(self.shape(), rhs.shape(), &dims)?;
            let tags: Vec<Tag> = s.tags().iter().flatten().copied().collect();
            if (1..tags.len()).any(|i| tags[..i].contains(&tags[i])) {
                return Err(format!("the result {s} would repeat a tag"));
            }
            Ok((Op::DotGeneral(dims), s))
        });
        record("dot", &[self, rhs], res)
    }

    /// Matrix product over the last axis of `self` and the second-last of
    /// `rhs` (or its first when it has rank 2): `[.., m, k] x [k, n]`, or
    /// `[b.., m, k] x [b.., k, n]` with equal batch axes.
    #[track_caller]
    pub fn matmul(self, rhs: Tensor) -> Tensor {
        let (lr, rr) = (self.rank(), rhs.rank());
        let res = if lr < 1 || rr < 2 {
            Err("matmul needs ranks >= 1 and >= 2".to_string())
        } else if rr == 2 {
            let dims = DotDims {
                lhs_batch: vec![],
                rhs_batch: vec![],
                lhs_contract: vec![lr - 1],
                rhs_contract: vec![0],
            };
            dot_shape(self.shape(), rhs.shape(), &dims).map(|s| (Op::DotGeneral(dims), s))
        } else if lr == rr {
            let b: Vec<usize> = (0..lr - 2).collect();
            let dims = DotDims {
                lhs_batch: b.clone(),
                rhs_batch: b,
                lhs_contract: vec![lr - 1],
                rhs_contract: vec![rr - 2],
            };
            dot_shape(self.shape(), rhs.shape(), &dims).map(|s| (Op::DotGeneral(dims), s))
        } else {
            Err(format!("matmul of ranks {lr} and {rr}"))
        };
        record("matmul", &[self, rhs], res)
    }
}

fn dot_by_tags(l: Shape, r: Shape, axes: &impl Axes) -> Result<DotDims, String> {
    let lc = l.resolve(axes)?;
    let rc = r.resolve(axes)?;
    let (mut lb, mut rb) = (vec![], vec![]);
    for (i, t) in l.tags().iter().enumerate() {
        if let Some(t) = t
            && !lc.contains(&i)
            && let Some(j) = r.axis(*t)
        {
            lb.push(i);
            rb.push(j);
        }
    }
    Ok(DotDims {
        lhs_batch: lb,
        rhs_batch: rb,
        lhs_contract: lc,
        rhs_contract: rc,
    })
}

/// The shape rule of `dot_general`.
fn dot_shape(l: Shape, r: Shape, d: &DotDims) -> Result<Shape, String> {
    if l.dtype() != r.dtype() {
        return Err(format!("dtypes differ: {} and {}", l.dtype(), r.dtype()));
    }
    if d.lhs_batch.len() != d.rhs_batch.len() || d.lhs_contract.len() != d.rhs_contract.len() {
        return Err("unpaired batch or contracting axes".into());
    }
    let in_range = |axes: &[usize], s: Shape| axes.iter().all(|&a| a < s.rank());
    if !in_range(&d.lhs_batch, l)
        || !in_range(&d.lhs_contract, l)
        || !in_range(&d.rhs_batch, r)
        || !in_range(&d.rhs_contract, r)
    {
        return Err("axis out of range".into());
    }
    for (k, (&a, &b)) in d
        .lhs_batch
        .iter()
        .zip(&d.rhs_batch)
        .chain(d.lhs_contract.iter().zip(&d.rhs_contract))
        .enumerate()
    {
        if l.dims()[a] != r.dims()[b] {
            let what = if k < d.lhs_batch.len() {
                "batch"
            } else {
                "contracting"
            };
            return Err(format!(
                "{what} axes {a} and {b} differ in size: {} and {}",
                l.dims()[a],
                r.dims()[b]
            ));
        }
    }
    let mut res = Shape::scalar(l.dtype());
    let mut push = |s: Shape, i: usize| {
        let at = res.rank();
        res = res
            .insert_axis(at, s.dims()[i], s.tag(i).map_or("", |t| t.as_str()))
            .unwrap_or(res);
    };
    for &a in &d.lhs_batch {
        push(l, a);
    }
    for i in free(l, &d.lhs_batch, &d.lhs_contract) {
        push(l, i);
    }
    for i in free(r, &d.rhs_batch, &d.rhs_contract) {
        push(r, i);
    }
    if res.rank() != l.rank() + r.rank() - d.lhs_batch.len() - 2 * d.lhs_contract.len() {
        return Err("repeated axes or a result of rank above 8".into());
    }
    Ok(res)
}

fn free(s: Shape, batch: &[usize], contract: &[usize]) -> Vec<usize> {
    (0..s.rank())
        .filter(|i| !batch.contains(i) && !contract.contains(i))
        .collect()
}

pub(crate) fn print(d: &DotDims, p: &mut OpPrinter<'_>) {
    let mut fields = vec![];
    let as_i64 = |v: &[usize]| i64_list(v.iter().map(|&x| x as i64));
    for (name, v) in [
        ("lhs_batching_dimensions", &d.lhs_batch),
        ("rhs_batching_dimensions", &d.rhs_batch),
        ("lhs_contracting_dimensions", &d.lhs_contract),
        ("rhs_contracting_dimensions", &d.rhs_contract),
    ] {
        if !v.is_empty() {
            fields.push(format!("{name} = {}", as_i64(v)));
        }
    }
    p.generic(
        "stablehlo.dot_general",
        &format!(
            "dot_dimension_numbers = #stablehlo.dot<{}>",
            fields.join(", ")
        ),
    )
}

pub(crate) fn eval(d: &DotDims, args: &[&Literal], shape: Shape) -> Literal {
    let (l, r) = (args[0], args[1]);
    let (ls, rs) = (l.shape(), r.shape());
    let (lst, rst) = (strides(ls.dims()), strides(rs.dims()));
    let (lf, rf) = (
        free(ls, &d.lhs_batch, &d.lhs_contract),
        free(rs, &d.rhs_batch, &d.rhs_contract),
    );
    let cdims: Vec<i64> = d.lhs_contract.iter().map(|&a| ls.dims()[a]).collect();
    let n_contract: usize = cdims.iter().product::<i64>() as usize;
    let nb = d.lhs_batch.len();
    let mut li = vec![0usize; ls.rank()];
    let mut ri = vec![0usize; rs.rank()];
    let data = (0..shape.count())
        .map(|flat| {
            let oi = unravel(flat, shape.dims());
            for k in 0..nb {
                li[d.lhs_batch[k]] = oi[k];
                ri[d.rhs_batch[k]] = oi[k];
            }
            for (j, &a) in lf.iter().enumerate() {
                li[a] = oi[nb + j];
            }
            for (j, &a) in rf.iter().enumerate() {
                ri[a] = oi[nb + lf.len() + j];
            }
            let mut acc = 0.0;
            for c in 0..n_contract {
                let ci = unravel(c, &cdims);
                for k in 0..ci.len() {
                    li[d.lhs_contract[k]] = ci[k];
                    ri[d.rhs_contract[k]] = ci[k];
                }
                let lo: usize = li.iter().zip(&lst).map(|(a, b)| a * b).sum();
                let ro: usize = ri.iter().zip(&rst).map(|(a, b)| a * b).sum();
                acc += l.data()[lo] * r.data()[ro];
            }
            round_to(shape.dtype(), acc)
        })
        .collect();
    Literal::new(shape, data)
}

#[cfg(test)]
mod tests {
    use crate::testing::{Tol, check};
    use crate::{DType, DotDims, Literal, Shape};

    fn lit(axes: &[(&str, i64)], data: &[f64]) -> Literal {
        Literal::new(Shape::tagged(DType::F32, axes), data.to_vec())
    }

    #[test]
    fn matmul_and_dot_general() {
        // [[1,2,3],[4,5,6]] @ [[1,0],[0,1],[1,1]] = [[4,5],[10,11]]
        let a = lit(&[("m", 2), ("k", 3)], &[1., 2., 3., 4., 5., 6.]);
        let b = lit(&[("k", 3), ("n", 2)], &[1., 0., 0., 1., 1., 1.]);
        let res = check(
            &[a.clone(), b.clone()],
            |x| x[0].matmul(x[1]),
            &[4., 5., 10., 11.],
            Tol::F32,
        );
        assert_eq!(
            res.shape(),
            Shape::tagged(DType::F32, &[("m", 2), ("n", 2)])
        );
        let dims = DotDims {
            lhs_batch: vec![],
            rhs_batch: vec![],
            lhs_contract: vec![1],
            rhs_contract: vec![0],
        };
        check(
            &[a, b],
            |x| x[0].dot_general(x[1], dims),
            &[4., 5., 10., 11.],
            Tol::F32,
        );
    }

    #[test]
    fn dot_by_tags_batches_shared_tags() {
        // Per head h: q[h] . k[h] over d.
        let q = lit(&[("h", 2), ("q", 1), ("d", 2)], &[1., 2., 3., 4.]);
        let k = lit(
            &[("h", 2), ("k", 2), ("d", 2)],
            &[1., 0., 0., 1., 1., 1., 2., 0.],
        );
        let res = check(
            &[q, k],
            |x| x[0].dot(x[1], "d"),
            &[1., 2., 7., 6.],
            Tol::F32,
        );
        assert_eq!(
            res.shape(),
            Shape::tagged(DType::F32, &[("h", 2), ("q", 1), ("k", 2)])
        );
    }

    #[test]
    fn bf16_batched_matmul() {
        let a = Literal::new(Shape::new(DType::BF16, &[2, 1, 2]), vec![1., 2., 0.5, 0.25]);
        let b = Literal::new(Shape::new(DType::BF16, &[2, 2, 1]), vec![3., 4., 8., 16.]);
        check(&[a, b], |x| x[0].matmul(x[1]), &[11., 8.], Tol::BF16);
    }
}
