//! A tensor seen as rows along one of its axes: the form the row kernels
//! (`radix.layer_norm`, `radix.rms_norm`, `radix.rotate`) take, the axis
//! last and the others merged before it, and the way back to the tensor's
//! own axes.

use crate::{Shape, Tensor};

/// The tags the row kernels give the flattened rows and the row's axis.
pub(super) const ROWS: &str = "__rows";
pub(super) const LAST: &str = "__norm";

/// How a tensor of one shape becomes rows along one axis (`[rows, d]`, or
/// `[t, m, d]` with the rows in groups), and back.
pub(super) struct Rows {
    /// The tensor's axes in the rows' order, the row's axis last.
    perm: Vec<usize>,
    /// The rows' dimensions and tags.
    dims: Vec<i64>,
    tags: Vec<&'static str>,
    /// The tensor's shape after `perm`.
    moved: Shape,
}

impl Rows {
    /// Rows of tensors shaped `x` along its axis `axis`; `None` where `x`
    /// has no such axis.
    pub(super) fn along(x: Tensor, axis: &str) -> Option<Rows> {
        let at = x.shape().axis(axis)?;
        Rows::grouped(x, &[], at, ["", ROWS, LAST]).map(|mut r| {
            // `[1 · rows, d]` as `[rows, d]`.
            r.dims.remove(0);
            r.tags.remove(0);
            r
        })
    }

    /// Rows of tensors shaped `x` along its axis `last`, grouped by its
    /// axes `lead` (in that order): `[t, m, d]`, `t` the product of the
    /// `lead` axes, `m` of the others, tagged `tags`. `None` where an axis
    /// is out of range or named twice.
    pub(super) fn grouped(
        x: Tensor,
        lead: &[usize],
        last: usize,
        tags: [&'static str; 3],
    ) -> Option<Rows> {
        let xs = x.shape();
        let mut perm = lead.to_vec();
        perm.extend((0..xs.rank()).filter(|i| *i != last && !lead.contains(i)));
        perm.push(last);
        let mut sorted = perm.clone();
        sorted.sort_unstable();
        if sorted != (0..xs.rank()).collect::<Vec<_>>() {
            return None;
        }
        let dims = xs.dims();
        let t: i64 = lead.iter().map(|&i| dims[i]).product();
        let d = dims[last];
        let m = xs.count() as i64 / (t * d).max(1);
        Some(Rows {
            dims: vec![t, m, d],
            tags: tags.to_vec(),
            moved: x.transpose(perm.as_slice()).shape(),
            perm,
        })
    }

    /// `x` (of the shape the rows were made for) as rows.
    #[track_caller]
    pub(super) fn flat(&self, x: Tensor) -> Tensor {
        x.transpose(self.perm.as_slice())
            .reshape(&self.dims)
            .with_tags(&self.tags)
    }

    /// Rows back in the shape they were made for.
    #[track_caller]
    pub(super) fn unflat(&self, y: Tensor) -> Tensor {
        // The inverse of `perm`: axis `perm[i]` of the tensor is axis `i`
        // of `moved`.
        let mut back = vec![0; self.perm.len()];
        for (i, &p) in self.perm.iter().enumerate() {
            back[p] = i;
        }
        y.reshape_to(self.moved).transpose(back.as_slice())
    }
}

/// Elements a task of a row kernel takes at least: fewer would cost more
/// to hand over than to compute.
const MIN_TASK_ELEMENTS: usize = 16 * 1024;

/// Runs `f(first, part)` over `y` in parts of whole rows of `d` elements
/// (`first`: the index in `y` of the part's first element), on
/// radix-quant's spinning workers: the row kernels' tasks.
pub(super) fn in_row_tasks(
    y: &mut [f32],
    d: usize,
    f: &(dyn Fn(usize, &mut [f32]) + Sync),
) -> Result<(), String> {
    if d == 0 || y.is_empty() {
        return Ok(());
    }
    let per_task = (MIN_TASK_ELEMENTS / d).clamp(1, y.len() / d) * d;
    radix_quant::SpinPool::global()
        .try_run_chunks(y, per_task, &|task, part| f(task * per_task, part))
}
