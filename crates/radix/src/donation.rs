//! Donation: an output may live in an input's device buffer.
//!
//! `y.reuse_buffer(x)` (or returning an input unchanged) makes the traced
//! program alias argument `x` to the output `y`: the argument is printed
//! with `tf.aliasing_output = <output index> : i32`, and at run time the
//! input buffer is consumed by the call (PJRT deletes it). A consumed
//! [`crate::Buffer`] is never undefined behaviour: passing it again to
//! [`crate::Executable::call`] is [`crate::Error::Donated`], and reading it is
//! a runtime error.

use crate::Tensor;
use crate::ir::{Function, Op};
use crate::tensor::{fail, op_of, record_reuse};

impl Tensor {
    /// This tensor, noting that it may be written into the device buffer of
    /// the argument `input` (same dims and dtype), which a call then
    /// consumes: a KV cache updated in place. Only takes effect when this
    /// tensor is a result. An argument may be donated once; donating it
    /// twice, or donating something that is not an argument, is an error.
    #[track_caller]
    pub fn reuse_buffer(self, input: Tensor) -> Tensor {
        let (s, x) = (self.shape(), input.shape());
        let res = match op_of(input) {
            Some(Op::Parameter(k)) if s.dims() == x.dims() && s.dtype() == x.dtype() => {
                record_reuse(self, k)
            }
            Some(Op::Parameter(_)) => Err(format!("{s} cannot reuse the buffer of {x}")),
            _ => Err("only an argument's buffer can be reused".into()),
        };
        match res {
            Ok(()) => self,
            Err(msg) => fail("reuse_buffer", msg, &[self, input], s),
        }
    }
}

/// Per argument, the output it aliases named by `reuse_buffer` in the
/// traced (not yet optimized) `f`.
pub(crate) fn reused(f: &Function) -> Vec<Option<usize>> {
    let mut res: Vec<Option<usize>> = vec![None; f.params.len()];
    let mut taken = vec![false; f.results.len()];
    for &(v, k) in &f.reuses {
        if let Some(i) = (0..f.results.len()).find(|&i| f.results[i] == v && !taken[i]) {
            res[k] = Some(i);
            taken[i] = true;
        }
    }
    res
}

/// `reused` plus the inputs (arguments from `first_input` on) that the
/// optimized `f` returns unchanged. Model weights returned unchanged do not
/// alias: they are bound once and reused.
pub(crate) fn aliases(
    f: &Function,
    mut reused: Vec<Option<usize>>,
    first_input: usize,
) -> Vec<Option<usize>> {
    let mut taken = vec![false; f.results.len()];
    for i in reused.iter().flatten() {
        taken[*i] = true;
    }
    for (i, &r) in f.results.iter().enumerate() {
        if let Op::Parameter(k) = f.node(r).op
            && k >= first_input
            && reused[k].is_none()
            && !taken[i]
        {
            reused[k] = Some(i);
            taken[i] = true;
        }
    }
    reused
}
