//! Collectives across processes: the processes of an MPI job (started by
//! `radix launch`, `mpiexec` or `srun`) as one axis, each process holding
//! its own value of a tensor.
//!
//! No CPU PJRT plugin moves data between processes, so each collective is
//! a custom call whose kernel calls MPI (`radix_mpi`), as mpi4jax does for
//! JAX. Results are the same bits on every rank: a reduction folds the
//! ranks' values in rank order ([`radix_mpi::fold`], which is also the
//! single-process reference). Every call site has its own message tag, so
//! the collectives XLA runs in any order or at once cannot take each
//! other's messages, and a peer that died makes the call an `Err` after
//! `RADIX_MPI_TIMEOUT` seconds instead of a hang. A program is traced for
//! the job it will run in ([`process_count`]); a process started alone is
//! a job of one, where every collective is the identity it should be.
//!
//! The sums, means, gathers, scatters, all-to-alls and permutations are
//! differentiable (the vjp of a sum over processes is a sum over
//! processes); `max` and `min` are not.
//!
//! ```no_run
//! # fn main() -> radix::Result<()> {
//! use radix::collective::{ReduceOp, all_reduce, axis_index};
//! use radix::{DType, Platform, Shape, Tensor};
//! let platform = Platform::cpu()?;
//! let x = Tensor::param(Shape::new(DType::F32, &[4]));
//! // Every rank's x summed, plus this rank's index.
//! let exe = radix::compile_fn(&platform, &x, |x| {
//!     all_reduce(x, ReduceOp::Sum) + axis_index().convert(DType::F32)
//! })?;
//! # Ok(())
//! # }
//! ```

mod kernels;

use crate::custom_call::Attrs;
use crate::tensor::control::poison;
use crate::{Error, Module, Result, Tensor};

use kernels::{
    ALL_GATHER, ALL_REDUCE, ALL_REDUCE_T, ALL_TO_ALL, AXIS_INDEX, PPERMUTE, REDUCE_SCATTER,
    REDUCE_SCATTER_T, emit, emit_axis_index,
};
pub use radix_mpi::ReduceOp;

/// The number of processes in this process's job (1 for a process started
/// alone); an `Err` if it was launched and MPI cannot be used.
pub fn process_count() -> Result<usize> {
    Ok(world()?.size())
}

/// This process's rank in its job, from 0.
pub fn process_index() -> Result<usize> {
    Ok(world()?.rank())
}

fn world() -> Result<&'static radix_mpi::World> {
    radix_mpi::world().map_err(|e| Error::Mpi(e.to_string()))
}

/// The job's size as the attribute every call carries, or the trace error.
#[track_caller]
fn size_attrs(name: &'static str, x: &[Tensor]) -> std::result::Result<(Attrs, i64), Vec<Tensor>> {
    match world() {
        Ok(w) => Ok((Attrs::new().with("size", w.size() as i64), w.size() as i64)),
        Err(e) => Err(poison(
            name,
            e.to_string(),
            x,
            &[x.first()
                .map_or(crate::Shape::scalar(crate::DType::I32), |t| t.shape())],
        )),
    }
}

/// Every rank's `x` reduced with `op`, on every rank (`stablehlo` would
/// say `all_reduce` over the process axis). Differentiable for
/// [`ReduceOp::Sum`] and [`ReduceOp::Mean`].
#[track_caller]
pub fn all_reduce(x: Tensor, op: ReduceOp) -> Tensor {
    let (attrs, _) = match size_attrs("all_reduce", &[x]) {
        Ok(a) => a,
        Err(p) => return p[0],
    };
    let attrs = attrs.with("op", op.name());
    let call = match op {
        ReduceOp::Sum | ReduceOp::Mean => &*ALL_REDUCE,
        ReduceOp::Max | ReduceOp::Min => &*ALL_REDUCE_T,
    };
    emit(call, x, attrs).with_shape_of(x)
}

/// Every tensor of `tree` through [`all_reduce`] with `op`: with
/// [`ReduceOp::Mean`], the gradient of a data-parallel step (each process's
/// gradient of its share of the batch) becomes the gradient of the whole
/// batch's mean loss, the same on every process.
///
/// The tensors of each dtype go as one all-reduce of them all, flattened
/// and joined (as PyTorch DDP's buckets do): one exchange between the
/// processes instead of one per tensor, and the same bits, since a
/// reduction is elementwise.
pub fn all_reduce_tree<M: Module + Clone>(tree: &M, op: ReduceOp) -> M {
    let mut leaves: Vec<Tensor> = vec![];
    tree.visit(&mut String::new(), &mut |_, t| leaves.push(*t));
    let mut dtypes: Vec<crate::DType> = leaves.iter().map(|t| t.dtype()).collect();
    dtypes.sort_by_key(|d| d.to_string());
    dtypes.dedup();
    let mut reduced = leaves.clone();
    for dtype in dtypes {
        let mine: Vec<usize> = (0..leaves.len())
            .filter(|&i| leaves[i].dtype() == dtype)
            .collect();
        let flat: Vec<Tensor> = mine.iter().map(|&i| leaves[i].reshape(&[-1])).collect();
        let sum = all_reduce(Tensor::concatenate(&flat, 0), op);
        let mut at = 0;
        for &i in &mine {
            let (shape, n) = (leaves[i].shape(), leaves[i].shape().count() as i64);
            reduced[i] = sum.slice(0, at..at + n).reshape_to(shape);
            at += n;
        }
    }
    let mut out = tree.clone();
    let mut next = reduced.into_iter();
    out.visit_mut(&mut String::new(), &mut |_, t| {
        *t = next.next().expect("visit_mut visits the leaves visit did");
    });
    out
}

/// Every rank's `x` concatenated along `axis` in rank order.
#[track_caller]
pub fn all_gather(x: Tensor, axis: usize) -> Tensor {
    let (attrs, n) = match size_attrs("all_gather", &[x]) {
        Ok(a) => a,
        Err(p) => return p[0],
    };
    let rank = x.rank();
    if axis >= rank {
        return poison(
            "all_gather",
            format!("axis {axis} of a rank-{rank} tensor"),
            &[x],
            &[x.shape()],
        )[0];
    }
    let blocks = emit(&ALL_GATHER, x, attrs);
    let mut dims = x.dims();
    dims[axis] *= n;
    move_front_to(blocks, axis).reshape(&dims)
}

/// Axis `axis` of `x` cut into as many blocks as there are ranks; rank `r`
/// gets block `r` of every rank's `x`, reduced with `op`.
/// Differentiable for [`ReduceOp::Sum`] and [`ReduceOp::Mean`].
#[track_caller]
pub fn reduce_scatter(x: Tensor, op: ReduceOp, axis: usize) -> Tensor {
    let (attrs, n) = match size_attrs("reduce_scatter", &[x]) {
        Ok(a) => a,
        Err(p) => return p[0],
    };
    let blocks = match split_to_front("reduce_scatter", x, axis, n) {
        Ok(b) => b,
        Err(p) => return *p,
    };
    let attrs = attrs.with("op", op.name());
    let call = match op {
        ReduceOp::Sum | ReduceOp::Mean => &*REDUCE_SCATTER,
        ReduceOp::Max | ReduceOp::Min => &*REDUCE_SCATTER_T,
    };
    emit(call, blocks, attrs)
}

/// Axis `split_axis` of `x` cut into as many blocks as there are ranks:
/// block `j` goes to rank `j`, and the blocks received are concatenated
/// along `concat_axis` in rank order (JAX's `all_to_all`).
#[track_caller]
pub fn all_to_all(x: Tensor, split_axis: usize, concat_axis: usize) -> Tensor {
    let (attrs, n) = match size_attrs("all_to_all", &[x]) {
        Ok(a) => a,
        Err(p) => return p[0],
    };
    if concat_axis >= x.rank() {
        return poison(
            "all_to_all",
            format!("concat axis {concat_axis} of a rank-{} tensor", x.rank()),
            &[x],
            &[x.shape()],
        )[0];
    }
    let blocks = match split_to_front("all_to_all", x, split_axis, n) {
        Ok(b) => b,
        Err(p) => return *p,
    };
    let moved = emit(&ALL_TO_ALL, blocks, attrs);
    let mut dims = blocks.dims()[1..].to_vec();
    dims[concat_axis] *= n;
    move_front_to(moved, concat_axis).reshape(&dims)
}

/// `x` sent along `pairs` of `(source, destination)` ranks (no rank twice
/// as a source nor as a destination): each rank gets the `x` of the rank
/// whose pair ends at it, or zeros if none does (JAX's `ppermute`).
#[track_caller]
pub fn ppermute(x: Tensor, pairs: &[(usize, usize)]) -> Tensor {
    let (attrs, n) = match size_attrs("ppermute", &[x]) {
        Ok(a) => a,
        Err(p) => return p[0],
    };
    if let Err(e) = radix_mpi::check_pairs(pairs, n as usize) {
        return poison("ppermute", e, &[x], &[x.shape()])[0];
    }
    let flat: Vec<i64> = pairs
        .iter()
        .flat_map(|&(s, d)| [s as i64, d as i64])
        .collect();
    emit(&PPERMUTE, x, attrs.with("pairs", flat)).with_shape_of(x)
}

/// This process's rank, an `i32` scalar (JAX's `axis_index`).
#[track_caller]
pub fn axis_index() -> Tensor {
    let (attrs, _) = match size_attrs("axis_index", &[]) {
        Ok(a) => a,
        Err(p) => return p[0],
    };
    // No messages: the site only keeps equal calls apart, harmlessly.
    emit_axis_index(attrs)
}

/// Refuses a program that uses collectives across processes and is
/// partitioned over several devices of this process, unless each is
/// inside a `shard_map` over those devices (which gives it the device's
/// index): XLA runs each collective once per device, and calls of one
/// process without their device's index would take each other's
/// messages.
pub(crate) fn check_partitions(program: &crate::Program) -> Result<()> {
    let Some(mesh) = program.mesh().filter(|m| m.n_devices() > 1) else {
        return Ok(());
    };
    let n = mesh.n_devices() as i64;
    // `axis_index` sends nothing, so it may run on every device.
    let shared = |site: &crate::ir::ops::custom_call::Site| {
        site.call.name() != AXIS_INDEX.name() && site.attrs.i64("devices") != Ok(n)
    };
    match crate::custom_call::first_named_where(program.function(), "radix.mpi.", &shared) {
        None => Ok(()),
        Some(name) => Err(Error::Mpi(format!(
            "{name}: collectives across processes in a program partitioned over {n} devices run inside a shard_map over them (each device exchanging with the same device of the other processes); this one is outside"
        ))),
    }
}

/// `x`'s axis `axis` split into `n` blocks, the block axis moved first.
#[track_caller]
fn split_to_front(
    name: &'static str,
    x: Tensor,
    axis: usize,
    n: i64,
) -> std::result::Result<Tensor, Box<Tensor>> {
    let dims = x.dims();
    if axis >= dims.len() || dims[axis] % n != 0 {
        return Err(Box::new(
            poison(
                name,
                format!(
                    "axis {axis} of shape {dims:?} does not split into {n} blocks (one per process)"
                ),
                &[x],
                &[x.shape()],
            )[0],
        ));
    }
    let mut split = dims.clone();
    split[axis] = dims[axis] / n;
    split.insert(axis, n);
    let mut perm: Vec<usize> = vec![axis];
    perm.extend((0..split.len()).filter(|&a| a != axis));
    Ok(x.reshape(&split).transpose(perm.as_slice()))
}

/// `x`'s axis 0 moved to just before axis `at` of the rest.
fn move_front_to(x: Tensor, at: usize) -> Tensor {
    let rank = x.rank();
    let mut perm: Vec<usize> = (1..=at).collect();
    perm.push(0);
    perm.extend(at + 1..rank);
    x.transpose(perm.as_slice())
}

impl Tensor {
    /// This tensor with `like`'s tags (a collective keeps its operand's).
    fn with_shape_of(self, like: Tensor) -> Tensor {
        self.reshape_to(like.shape())
    }
}
