//! Programs written per device, as JAX's `shard_map`: [`shard_map`] runs a
//! function once on every device of a [`Mesh`], on that device's block of
//! each argument, and the collectives here exchange values between the
//! devices inside it (StableHLO's `all_reduce`, `all_gather`,
//! `collective_permute`, `partition_id`; for Shardy, the default
//! partitioner, in an `sdy.manual_computation` over every mesh axis, as
//! JAX and ZML emit it; for GSPMD, between `SPMDFullToShardShape` and
//! `SPMDShardToFullShape`, as JAX lowers it there).
//!
//! The program compiles for a platform with the same mesh
//! ([`crate::Platform::with_mesh`]); another is an [`Error::Sharding`]
//! naming the `shard_map`. Its
//! reference semantics (the interpreter) run the body on a thread per
//! device. Its derivative is a `shard_map` of its body's derivative; the
//! sums, gathers, scatters, all-to-alls and permutations between devices
//! have derivatives, the maximum and minimum do not.
//!
//! ```no_run
//! # fn main() -> radix::Result<()> {
//! use radix::shard_map::{all_reduce, shard_map};
//! use radix::collective::ReduceOp;
//! use radix::sharding::Mesh;
//! use radix::{DType, Shape, Tensor};
//! let mesh = Mesh::new(&[4]);
//! let x = Tensor::param(Shape::new(DType::F32, &[8, 3]));
//! let program = radix::trace_fn(&x, |x| {
//!     // Each device sums its 2 rows, then the 4 partial sums are added.
//!     shard_map(&mesh, &[vec![Some(0), None]], &[vec![None]], &[x], |b| {
//!         vec![all_reduce(b[0].sum(0), ReduceOp::Sum, &[0])]
//!     })[0]
//! })?;
//! # Ok(())
//! # }
//! ```

use std::cell::RefCell;
use std::sync::Arc;

use crate::collective::ReduceOp;
use crate::ir::Op;
use crate::ir::ops::spmd::{Groups, Manual, Spmd, block_shape, local_parts};
use crate::ir::{Function, Loc};
use crate::sharding::Mesh;
use crate::tensor::control::{poison, record_multi};
use crate::tensor::reduce::scalar_block;
use crate::tensor::{fail, located, record_inferred, trace_hermetic_block};
use crate::{DType, Error, Program, Result, Shape, Tensor};
use std::panic::Location;

pub use crate::ir::ops::spmd::Spec;

thread_local! {
    /// The meshes of the `shard_map` bodies being traced, innermost last.
    static MESHES: RefCell<Vec<Mesh>> = const { RefCell::new(vec![]) };
}

/// `f` run on every device of `mesh`: argument `i` split as `in_specs[i]`
/// says (the mesh axis each of its axes is split along, `None` for whole),
/// each device's blocks given to `f`; result `j` of `f` is that device's
/// block of result `j`, put together as `out_specs[j]` says (a mesh axis
/// the spec does not name must hold the same value on each of its devices).
/// Inside `f`, the collectives of this module exchange values between the
/// devices.
#[track_caller]
pub fn shard_map(
    mesh: &Mesh,
    in_specs: &[Spec],
    out_specs: &[Spec],
    args: &[Tensor],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let placeholders = vec![
        args.first()
            .map_or(Shape::scalar(DType::F32), |a| a.shape());
        out_specs.len()
    ];
    if in_specs.len() != args.len() {
        let msg = format!("{} arguments and {} in_specs", args.len(), in_specs.len());
        return poison("shard_map", msg, args, &placeholders);
    }
    if let Err(msg) = check_processes(mesh) {
        return poison("shard_map", msg, args, &placeholders);
    }
    // This process's program: over its own devices, its arguments already
    // its blocks along the process axis.
    let (local, local_ins, _) = local_parts(mesh, in_specs, out_specs);
    let blocks = (args.iter().zip(&local_ins))
        .map(|(a, spec)| block_shape(&local, a.shape(), spec).map(|s| s.unsharded()))
        .collect::<std::result::Result<Vec<_>, _>>();
    let blocks = match blocks {
        Ok(b) => b,
        Err(msg) => return poison("shard_map", msg, args, &placeholders),
    };
    let body = trace_hermetic_block("shard_map body", &blocks, |xs| {
        let _inside = Inside::new(mesh);
        f(xs)
    });
    let op = Op::Spmd(Spmd::Manual(Manual {
        body: Arc::new(body.function),
        mesh: mesh.clone(),
        in_specs: in_specs.to_vec(),
        out_specs: out_specs.to_vec(),
    }));
    record_multi("shard_map", op, args, &placeholders)
}

/// The innermost `shard_map` being traced, for as long as it lives (its
/// mesh on [`MESHES`], taken off when dropped, even by a panic).
struct Inside;

impl Inside {
    fn new(mesh: &Mesh) -> Inside {
        MESHES.with(|m| m.borrow_mut().push(mesh.clone()));
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        MESHES.with(|m| m.borrow_mut().pop());
    }
}

/// `Err` unless a mesh spanning processes spans those of this job.
fn check_processes(mesh: &Mesh) -> std::result::Result<(), String> {
    if !mesh.spans_processes() {
        return Ok(());
    }
    let job = crate::collective::process_count().map_err(|e| e.to_string())?;
    match mesh.dims()[0] == job {
        true => Ok(()),
        false => Err(format!(
            "the mesh {:?} spans {} processes; this job has {job}",
            mesh.dims(),
            mesh.dims()[0]
        )),
    }
}

/// The axes of the innermost `shard_map`'s mesh that `axes` names: whether
/// they include the processes, and the others as axes of the process's
/// own mesh; `Err` outside `shard_map` or for an axis the mesh lacks.
fn split_axes(axes: &[usize]) -> std::result::Result<(bool, Vec<usize>), String> {
    let Some(mesh) = innermost() else {
        return Err("outside shard_map".into());
    };
    if axes.is_empty() || axes.iter().any(|&a| a >= mesh.dims().len()) {
        return Err(format!("mesh axes {axes:?} of a mesh {:?}", mesh.dims()));
    }
    match mesh.spans_processes() {
        true => Ok((
            axes.contains(&0),
            axes.iter().filter_map(|a| a.checked_sub(1)).collect(),
        )),
        false => Ok((false, axes.to_vec())),
    }
}

/// What a mesh axis of the innermost `shard_map` is to this process.
enum Axis {
    /// The processes of the job (axis 0 of a mesh spanning them).
    Processes,
    /// This axis of the process's own mesh of devices.
    Devices(usize),
}

/// What mesh axis `mesh_axis` of the innermost `shard_map` is; `Err`
/// outside `shard_map` or for an axis the mesh lacks.
fn one_axis(mesh_axis: usize) -> std::result::Result<Axis, String> {
    let (processes, local) = split_axes(&[mesh_axis])?;
    Ok(if processes {
        Axis::Processes
    } else {
        Axis::Devices(local[0])
    })
}

/// Every device's `x` of each group of devices that differ only along the
/// mesh axes `axes`, reduced with `op`, on each of them (JAX's `psum`,
/// `pmax`, `pmin`, `pmean`). Over the process axis of a mesh spanning
/// processes this is [`crate::collective::all_reduce`], after the
/// reduction over the process's own devices. Differentiable for
/// [`ReduceOp::Sum`] and [`ReduceOp::Mean`].
#[track_caller]
pub fn all_reduce(x: Tensor, op: ReduceOp, axes: &[usize]) -> Tensor {
    let (processes, local) = match split_axes(axes) {
        Ok(a) => a,
        Err(msg) => return fail("all_reduce", msg, &[x], x.shape()),
    };
    let mut y = x;
    if !local.is_empty() {
        let groups = groups(&local);
        let n = groups[0].len();
        let body = Arc::new(reduction(op, x.dtype()));
        let reduced = record_inferred(
            "all_reduce",
            &[y],
            Ok(Op::Spmd(Spmd::AllReduce { body, groups })),
        );
        y = mean_of(op, reduced, n);
    }
    if processes {
        // A mean of equal groups' means is the mean of them all.
        y = crate::collective::all_reduce(y, op);
    }
    y
}

/// The group's `x` reduced with `op` (as [`all_reduce`] over mesh axis
/// `mesh_axis`), then cut along `axis` into as many blocks as the group
/// has devices: each device gets the block of its position (JAX's
/// `psum_scatter` with `tiled=True`). Differentiable for
/// [`ReduceOp::Sum`] and [`ReduceOp::Mean`].
#[track_caller]
pub fn reduce_scatter(x: Tensor, op: ReduceOp, axis: usize, mesh_axis: usize) -> Tensor {
    match one_axis(mesh_axis) {
        Err(msg) => fail("reduce_scatter", msg, &[x], x.shape()),
        Ok(Axis::Processes) => crate::collective::reduce_scatter(x, op, axis),
        Ok(Axis::Devices(local)) => {
            let groups = groups(&[local]);
            let n = groups[0].len();
            let body = Arc::new(reduction(op, x.dtype()));
            let op_node = Op::Spmd(Spmd::ReduceScatter { body, axis, groups });
            mean_of(op, record_inferred("reduce_scatter", &[x], Ok(op_node)), n)
        }
    }
}

/// `x` cut along `split` into as many blocks as the group along mesh axis
/// `mesh_axis` has devices, block `p` sent to the device at position `p`,
/// and the blocks each device gets joined along `concat` in the group's
/// order (JAX's `all_to_all` with `tiled=True`).
#[track_caller]
pub fn all_to_all(x: Tensor, split: usize, concat: usize, mesh_axis: usize) -> Tensor {
    match one_axis(mesh_axis) {
        Err(msg) => fail("all_to_all", msg, &[x], x.shape()),
        Ok(Axis::Processes) => crate::collective::all_to_all(x, split, concat),
        Ok(Axis::Devices(local)) => {
            let groups = groups(&[local]);
            let op = Op::Spmd(Spmd::AllToAll {
                split,
                concat,
                groups,
            });
            record_inferred("all_to_all", &[x], Ok(op))
        }
    }
}

/// The scalar function a collective reduces with, `(a, b) -> a op b`, at
/// the caller's line.
#[track_caller]
pub(crate) fn reduction(op: ReduceOp, dtype: DType) -> Function {
    let block = located(Location::caller(), || {
        scalar_block("all_reduce body", &[dtype], 2, |s| {
            vec![match op {
                ReduceOp::Sum | ReduceOp::Mean => s[0] + s[1],
                ReduceOp::Max => s[0].maximum(s[1]),
                ReduceOp::Min => s[0].minimum(s[1]),
            }]
        })
    });
    block.function
}

/// `summed` divided by the `n` values it sums, for [`ReduceOp::Mean`].
#[track_caller]
fn mean_of(op: ReduceOp, summed: Tensor, n: usize) -> Tensor {
    match op {
        ReduceOp::Mean => summed / n as f64,
        _ => summed,
    }
}

/// The `x` of every device of the group along mesh axis `mesh_axis`,
/// concatenated along `axis` in the order of their positions on it
/// (JAX's `all_gather` with `tiled=True`).
#[track_caller]
pub fn all_gather(x: Tensor, axis: usize, mesh_axis: usize) -> Tensor {
    match one_axis(mesh_axis) {
        Err(msg) => fail("all_gather", msg, &[x], x.shape()),
        Ok(Axis::Processes) => crate::collective::all_gather(x, axis),
        Ok(Axis::Devices(local)) => {
            let op = Op::Spmd(Spmd::AllGather {
                axis,
                groups: groups(&[local]),
            });
            record_inferred("all_gather", &[x], Ok(op))
        }
    }
}

/// This device's position along mesh axis `mesh_axis`, an `i32` scalar
/// (JAX's `axis_index`).
#[track_caller]
pub fn axis_index(mesh_axis: usize) -> Tensor {
    let scalar = Shape::scalar(DType::I32);
    let local = match one_axis(mesh_axis) {
        Err(msg) => return fail("axis_index", msg, &[], scalar),
        Ok(Axis::Processes) => return crate::collective::axis_index(),
        Ok(Axis::Devices(local)) => local,
    };
    let dims = innermost()
        .map(|m| m.local().dims().to_vec())
        .unwrap_or_default();
    let stride: usize = dims[local + 1..].iter().product();
    let id = record_inferred("axis_index", &[], Ok(Op::Spmd(Spmd::PartitionId)));
    let id = id.convert(DType::I32);
    (id / stride as f64).rem(Tensor::scalar(dims[local] as f64, DType::I32))
}

/// `x` sent along `pairs` of `(source, destination)` positions on mesh
/// axis `mesh_axis`, within each group of devices that differ only along
/// it: each device gets the `x` of the device whose pair ends at it, or
/// zeros if none does (JAX's `ppermute`). No position may be a source or a
/// destination twice.
#[track_caller]
pub fn ppermute(x: Tensor, mesh_axis: usize, pairs: &[(usize, usize)]) -> Tensor {
    let local = match one_axis(mesh_axis) {
        Err(msg) => return fail("ppermute", msg, &[x], x.shape()),
        Ok(Axis::Processes) => return crate::collective::ppermute(x, pairs),
        Ok(Axis::Devices(local)) => local,
    };
    let groups = groups(&[local]);
    if let Err(msg) = radix_mpi::check_pairs(pairs, groups[0].len()) {
        return fail("ppermute", msg, &[x], x.shape());
    }
    let pairs: Vec<[i64; 2]> = (groups.iter())
        .flat_map(|g| pairs.iter().map(|&(s, d)| [g[s], g[d]]))
        .collect();
    record_inferred("ppermute", &[x], Ok(Op::Spmd(Spmd::Permute { pairs })))
}

/// Inside a `shard_map` over several devices: their number and this
/// device's index (a `u32` scalar, `stablehlo.partition_id`), which the
/// collectives across processes take.
#[track_caller]
pub(crate) fn device_index() -> Option<(usize, Tensor)> {
    let mesh = innermost()
        .map(|m| m.local())
        .filter(|m| m.n_devices() > 1)?;
    let id = record_inferred("partition_id", &[], Ok(Op::Spmd(Spmd::PartitionId)));
    Some((mesh.n_devices(), id))
}

/// The innermost `shard_map`'s mesh being traced.
fn innermost() -> Option<Mesh> {
    MESHES.with(|m| m.borrow().last().cloned())
}

/// The groups of the devices of this process's part of the innermost
/// mesh that differ only along its (checked) axes `axes`, each ordered by
/// position along them.
fn groups(axes: &[usize]) -> Groups {
    let mesh = innermost()
        .map(|m| m.local())
        .unwrap_or_else(|| Mesh::new(&[1]));
    let dims = mesh.dims();
    let mut groups: Vec<(Vec<usize>, Vec<i64>)> = vec![];
    for d in 0..mesh.n_devices() {
        let c = mesh.coords(d);
        let key: Vec<usize> = (0..dims.len())
            .filter(|m| !axes.contains(m))
            .map(|m| c[m])
            .collect();
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(d as i64),
            None => groups.push((key, vec![d as i64])),
        }
    }
    groups.into_iter().map(|g| g.1).collect()
}

/// Refuses to compile a program with a `shard_map` written for another
/// mesh than the one the program is partitioned over, naming the
/// `shard_map`.
pub(crate) fn check(program: &Program) -> Result<()> {
    fn walk(f: &Function, found: &mut Vec<(Mesh, Loc)>) {
        for (node, &loc) in f.nodes.iter().zip(&f.locs) {
            if let Op::Spmd(Spmd::Manual(Manual { mesh, .. })) = &node.op {
                found.push((mesh.local(), loc));
            }
            node.op.bodies().into_iter().for_each(|b| walk(b, found));
        }
    }
    let mut found = vec![];
    walk(program.function(), &mut found);
    for (mesh, loc) in found {
        let at = format!("the shard_map at {}:{}", loc.file(), loc.line());
        if program.mesh() != Some(&mesh) {
            return Err(Error::Sharding(format!(
                "{at} runs on a mesh {:?}; the program is partitioned over {:?} (Platform::with_mesh)",
                mesh.dims(),
                program.mesh().map(Mesh::dims)
            )));
        }
    }
    Ok(())
}
