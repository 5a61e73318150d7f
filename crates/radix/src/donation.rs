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
use crate::ir::{Function, Op, ValueId};
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

/// Per argument, the output it aliases: outputs named by `reuse_buffer`,
/// then inputs (arguments from `first_input` on) returned unchanged. Model
/// weights returned unchanged do not alias: they are bound once and reused.
pub(crate) fn aliases(f: &Function, results: &[ValueId], first_input: usize) -> Vec<Option<usize>> {
    let mut res: Vec<Option<usize>> = vec![None; f.params.len()];
    let mut taken = vec![false; results.len()];
    for &(v, k) in &f.reuses {
        if let Some(i) = (0..results.len()).find(|&i| results[i] == v && !taken[i]) {
            res[k] = Some(i);
            taken[i] = true;
        }
    }
    for (i, &r) in results.iter().enumerate() {
        if let Op::Parameter(k) = f.node(r).op
            && k >= first_input
            && res[k].is_none()
            && !taken[i]
        {
            res[k] = Some(i);
            taken[i] = true;
        }
    }
    res
}
