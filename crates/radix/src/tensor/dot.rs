//! Contractions: `dot_general` (positional batch and contracting axes),
//! `dot` by tags, and `matmul`.
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/dot.rs`.

use crate::Tensor;
use crate::ir::Op;
use crate::ir::ops::dot::*;
use crate::shape::{Axes, Tag};
use crate::tensor::{record, record_inferred};

impl Tensor {
    /// The general contraction (`stablehlo.dot_general`): the result has the
    /// batch axes (tags from the left), then the left's free axes, then the right's.
    #[track_caller]
    pub fn dot_general(self, rhs: Tensor, dims: DotDims) -> Tensor {
        record_inferred("dot_general", &[self, rhs], Ok(Op::DotGeneral(dims)))
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
        let dims = if lr < 1 || rr < 2 {
            Err("matmul needs ranks >= 1 and >= 2".to_string())
        } else if rr == 2 {
            Ok(DotDims {
                lhs_batch: vec![],
                rhs_batch: vec![],
                lhs_contract: vec![lr - 1],
                rhs_contract: vec![0],
            })
        } else if lr == rr {
            let b: Vec<usize> = (0..lr - 2).collect();
            Ok(DotDims {
                lhs_batch: b.clone(),
                rhs_batch: b,
                lhs_contract: vec![lr - 1],
                rhs_contract: vec![rr - 2],
            })
        } else {
            Err(format!("matmul of ranks {lr} and {rr}"))
        };
        record_inferred("matmul", &[self, rhs], dims.map(Op::DotGeneral))
    }
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
