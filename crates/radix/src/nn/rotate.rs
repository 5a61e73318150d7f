//! The rotation of rotary embeddings as the custom call `radix.rotate`:
//! each head vector turned by its position's angles in one pass, its bits
//! the same whatever tokens share the step. XLA fused the same
//! multiply-adds differently for steps of several tokens per sequence, so a
//! token's rotated query or key differed in its last bits from the same
//! token's alone; with 8-bit products that moved activations to other
//! codes. Elsewhere, and wherever a gradient flows through it (in a
//! training step's forward pass too), the same formula in ops ([`traced`]).

use std::sync::LazyLock;

use super::RopeLayout;
use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::nn::broadcast_like;
use crate::nn::rows::{Rows, in_row_tasks};
use crate::nn::tags::HD;
use crate::tensor::located;
use crate::{DType, Shape, Size, Tensor};
use std::panic::Location;

/// Half the head width: one rotation angle each.
pub(super) const HD2: &str = "hd2";
/// The two elements a rotation mixes.
const ROT: &str = "rot";
/// The tags of the call's operands: tokens, head vectors of a token.
const T: &str = "__t";
const M: &str = "__m";

/// `x [t, m, hd] f32` (`m` head vectors per token), each turned by its
/// token's `cos [t, hd/2]` and `sin [t, hd/2]`; attribute `adjacent` (1:
/// pairs `(2i, 2i + 1)`, 0: `(i, i + hd/2)`).
static ROTATE: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.rotate", 1, shape_rule, kernel)
        .fallback(|x, attrs| vec![traced(x[0], x[1], x[2], layout(attrs))])
        // The kernel computes the fallback's function.
        .differentiate_fallback()
        .register()
        .expect("radix.rotate is declared once")
});

fn layout(attrs: &Attrs) -> RopeLayout {
    match attrs.i64("adjacent") {
        Ok(0) => RopeLayout::HalfSplit,
        _ => RopeLayout::AdjacentPair,
    }
}

/// `x` (with axis `hd` and the axes of `cos`) turned by `cos` and `sin`
/// (tagged as the positions, then `hd2`; `x`'s dtype): the kernel for f32
/// on the CPU plugin, the formula in ops otherwise.
#[track_caller]
pub(super) fn rotate(x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout) -> Tensor {
    let (xs, cs) = (x.shape(), cos.shape());
    // `x`'s axis of each position axis of `cos`, of the same size.
    let lead: Option<Vec<usize>> = cs.tags()[..cs.rank() - 1]
        .iter()
        .zip(cs.dims())
        .map(|(t, &d)| {
            let at = xs.axis(t.as_ref()?.as_str())?;
            (xs.dims()[at] == d).then_some(at)
        })
        .collect();
    let rows = match (lead, xs.axis(HD), xs.dtype()) {
        (Some(lead), Some(hd), DType::F32) => Rows::grouped(x, &lead, hd, [T, M, HD]),
        _ => None,
    };
    let Some(rows) = rows else {
        return traced(x, cos, sin, layout);
    };
    // `[t, hd/2]`: the positions flattened as `rows` flattens `x`'s.
    let half = cs.dims()[cs.rank() - 1];
    let angles = |c: Tensor| {
        c.reshape(&[cs.count() as i64 / half.max(1), half])
            .with_tags(&[T, HD2])
    };
    let attrs = Attrs::new().with("adjacent", i64::from(layout == RopeLayout::AdjacentPair));
    // The closure's nodes too are at the caller's line.
    let (cos, sin) = located(Location::caller(), || (angles(cos), angles(sin)));
    let y = ROTATE.call(&[rows.flat(x), cos, sin], &attrs)[0];
    rows.unflat(y)
}

/// The formula in ops: pairs `(x0, x1)` to `(x0·c − x1·s, x1·c + x0·s)`.
#[track_caller]
pub(super) fn traced(x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout) -> Tensor {
    let half = cos.shape().dims()[cos.rank() - 1];
    let parts: [(&str, Size); 2] = match layout {
        RopeLayout::HalfSplit => [(ROT, 2.into()), (HD2, half.into())],
        RopeLayout::AdjacentPair => [(HD2, half.into()), (ROT, 2.into())],
    };
    let split = x.split_axis(HD, &parts);
    let at = split.shape().axis(ROT).unwrap_or(0);
    let x0 = split.slice(ROT, 0..1).squeeze(ROT);
    let x1 = split.slice(ROT, 1..2).squeeze(ROT);
    let (c, s) = (broadcast_like(cos, x0), broadcast_like(sin, x0));
    let y0 = x0 * c - x1 * s;
    let y1 = x1 * c + x0 * s;
    let pair = match layout {
        RopeLayout::HalfSplit => [ROT, HD2],
        RopeLayout::AdjacentPair => [HD2, ROT],
    };
    Tensor::stack(&[y0, y1], at, ROT).merge_axes(pair, HD)
}

fn shape_rule(s: &[Shape], attrs: &Attrs) -> Result<Vec<Shape>, String> {
    attrs.i64("adjacent")?;
    let [x, c, sn] = s else {
        return Err(format!("wants x, cos and sin, got {s:?}"));
    };
    let f32s = [x, c, sn].iter().all(|s| s.dtype() == DType::F32);
    let fits = x.rank() == 3
        && c.rank() == 2
        && c == sn
        && c.dims()[0] == x.dims()[0]
        && 2 * c.dims()[1] == x.dims()[2];
    if !f32s || !fits {
        return Err(format!(
            "wants f32 x [t, m, hd], cos and sin [t, hd/2], got {x}, {c} and {sn}"
        ));
    }
    Ok(vec![*x])
}

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let adjacent = layout(k.attrs()) == RopeLayout::AdjacentPair;
    let (x, cos, sin) = (k.input::<f32>(0)?, k.input::<f32>(1)?, k.input::<f32>(2)?);
    let y = k.output::<f32>(0)?;
    let shape = k.input_shape(0).ok_or("no input 0")?;
    let (m, hd) = (shape.dims()[1] as usize, shape.dims()[2] as usize);
    let (token, half) = (m * hd, hd / 2);
    // A token's head vectors are a row.
    in_row_tasks(y, token, &|first, y| {
        let first = first / token;
        for (i, y) in y.chunks_exact_mut(token).enumerate() {
            let t = first + i;
            let (c, s) = (&cos[t * half..][..half], &sin[t * half..][..half]);
            let x = &x[t * token..][..token];
            for (x, y) in x.chunks_exact(hd).zip(y.chunks_exact_mut(hd)) {
                for j in 0..half {
                    let (a, b) = if adjacent {
                        (2 * j, 2 * j + 1)
                    } else {
                        (j, j + half)
                    };
                    y[a] = x[a] * c[j] - x[b] * s[j];
                    y[b] = x[b] * c[j] + x[a] * s[j];
                }
            }
        }
    })
}
