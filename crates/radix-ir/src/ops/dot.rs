//! Contractions, `stablehlo.dot_general`: the axes, the shape rule (and the
//! axes of a contraction by tags), printing and reference semantics.

use crate::Shape;
use crate::literal::{Literal, round_to, strides, unravel};
use crate::print::{OpPrinter, i64_list};
use crate::shape::Axes;

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

/// The axes of a contraction of `l` and `r` over the axes `axes` names in
/// both: the other tags they share become batch axes.
pub fn dot_by_tags(l: Shape, r: Shape, axes: &impl Axes) -> Result<DotDims, String> {
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
pub fn dot_shape(l: Shape, r: Shape, d: &DotDims) -> Result<Shape, String> {
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

/// The axes of `s` that are neither batch nor contracting.
pub fn free(s: Shape, batch: &[usize], contract: &[usize]) -> Vec<usize> {
    (0..s.rank())
        .filter(|i| !batch.contains(i) && !contract.contains(i))
        .collect()
}

/// `stablehlo.dot_general` with its dimension numbers.
pub fn print(d: &DotDims, p: &mut OpPrinter<'_>) {
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

/// The reference semantics: sums of products in f64, rounded to the dtype.
pub fn eval(d: &DotDims, args: &[&Literal], shape: Shape) -> Literal {
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

impl super::Family for DotDims {
    fn name(&self) -> &'static str {
        "dot_general"
    }

    fn infer(&self, args: &[Shape], _: Shape) -> Result<super::Shapes, String> {
        super::arity(args, 2)?;
        dot_shape(args[0], args[1], self).map(|s| vec![s])
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        print(self, p)
    }

    fn eval(&self, args: &[&Literal], shape: Shape) -> Vec<Literal> {
        vec![eval(self, args, shape)]
    }
}
