//! Programs written per device (JAX's `shard_map`): `sdy.manual_computation`,
//! whose body runs once on every device of a mesh on that device's block
//! of each operand, and the collectives such a body calls to exchange
//! values between devices (`stablehlo.all_reduce`, `all_gather`,
//! `collective_permute`, `partition_id`). The tracing side is radix's
//! `shard_map.rs`.
//!
//! Reference semantics: the manual computation runs its body on one thread
//! per device, and each collective hands its value to the others through
//! an [`Exchange`], so a collective anywhere in the body (inside a loop, a
//! call) meets its peers as on the devices. A collective outside any manual
//! computation is on a device of its own: its group is itself.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::interp;
use crate::literal::{Literal, decode, encode};
use crate::ops::reduce::apply;
use crate::print::{OpPrinter, i64_list, tensor_type};
use crate::sharding::{Mesh, Partitioner, place_block, slice_block};
use crate::{DType, Function, Shape};

/// The mesh axis each axis of a tensor is split along (`None`: whole).
pub type Spec = Vec<Option<usize>>;

/// Groups of devices (partition ids) that exchange values, each in the
/// order its members' values are combined.
pub type Groups = Vec<Vec<i64>>;

/// A program per device and what its devices exchange.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Spmd {
    /// `sdy.manual_computation`: a program run per device.
    Manual(Manual),
    /// `stablehlo.all_reduce`: each device gets its group's values folded
    /// by `body` (two scalars to one) in the group's order.
    AllReduce {
        /// The reduction, `(a, b) -> a op b` on scalars of the dtype.
        body: Arc<Function>,
        /// The groups.
        groups: Groups,
    },
    /// `stablehlo.all_gather`: the group's values concatenated along
    /// `axis` in the group's order.
    AllGather {
        /// The axis the values are joined along.
        axis: usize,
        /// The groups.
        groups: Groups,
    },
    /// `stablehlo.reduce_scatter`: the group's values folded by `body` as
    /// [`Spmd::AllReduce`] does, then cut along `axis` into as many blocks
    /// as the group has devices: each gets the block of its position.
    ReduceScatter {
        /// The reduction, `(a, b) -> a op b` on scalars of the dtype.
        body: Arc<Function>,
        /// The axis the result is cut along.
        axis: usize,
        /// The groups.
        groups: Groups,
    },
    /// `stablehlo.all_to_all`: each device cuts its value along `split`
    /// into as many blocks as its group has devices and sends block `p` to
    /// the device at position `p`, which joins what it gets along `concat`
    /// in the group's order.
    AllToAll {
        /// The axis each value is cut along.
        split: usize,
        /// The axis the blocks received are joined along.
        concat: usize,
        /// The groups.
        groups: Groups,
    },
    /// `stablehlo.collective_permute`: device `t` gets the value of the
    /// device `s` of the pair `[s, t]`, or zeros where no pair ends at it.
    Permute {
        /// `[source, target]` partition ids.
        pairs: Vec<[i64; 2]>,
    },
    /// `stablehlo.partition_id`: the device's index in the mesh, a `u32`.
    PartitionId,
}

/// `sdy.manual_computation` over every axis of `mesh`: operand `i` split
/// as `in_specs[i]`, each device's block given to `body`, whose result `j`
/// is the device's block of the result split as `out_specs[j]` (a mesh
/// axis the spec does not name holds the same value on each of its
/// devices). Of a mesh spanning processes, each process runs the part of
/// its own devices ([`Manual::local`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Manual {
    /// The per-device program, hermetic.
    pub body: Arc<Function>,
    /// The devices it runs on.
    pub mesh: Mesh,
    /// How each operand is split.
    pub in_specs: Vec<Spec>,
    /// How each result is put together.
    pub out_specs: Vec<Spec>,
}

impl Manual {
    /// One process's part: the mesh of its devices, and the specs over
    /// them (a mesh spanning processes leaves out its process axis, along
    /// which each process's operands already are its blocks; see
    /// [`Mesh::local`]).
    pub fn local(&self) -> (Mesh, Vec<Spec>, Vec<Spec>) {
        local_parts(&self.mesh, &self.in_specs, &self.out_specs)
    }
}

impl super::Family for Spmd {
    fn name(&self) -> &'static str {
        match self {
            Spmd::Manual(_) => "shard_map",
            Spmd::AllReduce { .. } => "all_reduce",
            Spmd::AllGather { .. } => "all_gather",
            Spmd::ReduceScatter { .. } => "reduce_scatter",
            Spmd::AllToAll { .. } => "all_to_all",
            Spmd::Permute { .. } => "ppermute",
            Spmd::PartitionId => "partition_id",
        }
    }

    /// A manual computation's operands split by their specs are its body's
    /// parameters, and its body's results joined by theirs are its
    /// results; a collective keeps its operand's type but for a gather's
    /// axis, as many times longer as a group has devices.
    fn infer(&self, args: &[Shape], _: Shape) -> Result<super::Shapes, String> {
        match self {
            Spmd::Manual(manual) => {
                let (body, (mesh, in_specs, out_specs)) = (&manual.body, &manual.local());
                if in_specs.len() != args.len() || out_specs.len() != body.results.len() {
                    return Err(format!(
                        "{} operands and {} results for {} and {} specs",
                        args.len(),
                        body.results.len(),
                        in_specs.len(),
                        out_specs.len()
                    ));
                }
                let blocks = (args.iter().zip(in_specs))
                    .map(|(&s, spec)| block_shape(mesh, s, spec))
                    .collect::<Result<Vec<_>, _>>()?;
                let results = body.result_shapes();
                super::signature(body, "per-device body", &blocks, &results)?;
                (results.iter().zip(out_specs))
                    .map(|(&s, spec)| whole_shape(mesh, s, spec))
                    .collect()
            }
            Spmd::AllReduce { body, groups } => {
                let (x, _) = collective(args, groups)?;
                check_reduction(body, x)?;
                Ok(vec![x])
            }
            Spmd::AllGather { axis, groups } => {
                let (x, n) = collective(args, groups)?;
                Ok(vec![x.with_dim(*axis, dim(x, *axis)? * n)])
            }
            Spmd::ReduceScatter { body, axis, groups } => {
                let (x, n) = collective(args, groups)?;
                check_reduction(body, x)?;
                Ok(vec![x.with_dim(*axis, split(x, *axis, n)?)])
            }
            Spmd::AllToAll {
                split: cut,
                concat,
                groups,
            } => {
                let (x, n) = collective(args, groups)?;
                let x = x.with_dim(*cut, split(x, *cut, n)?);
                Ok(vec![x.with_dim(*concat, dim(x, *concat)? * n)])
            }
            Spmd::Permute { .. } => super::arity(args, 1).map(|()| vec![args[0]]),
            Spmd::PartitionId => super::arity(args, 0).map(|()| vec![Shape::scalar(DType::U32)]),
        }
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        match self {
            Spmd::Manual(manual) => {
                let (body, (mesh, ins, outs)) = (&manual.body, &manual.local());
                match p.partitioning().0 {
                    Partitioner::Shardy => print_shardy(p, body, mesh, ins, outs),
                    Partitioner::Gspmd => print_gspmd(p, body, mesh, ins, outs),
                }
            }
            Spmd::AllReduce { body, groups } => {
                let region = p.region(0, body, 2, &[]);
                let attrs = format!("{}, use_global_device_ids", channel_and_groups(p, groups));
                p.generic_with("stablehlo.all_reduce", &region, &attrs);
            }
            Spmd::AllGather { axis, groups } => {
                let attrs = format!(
                    "all_gather_dim = {axis} : i64, {}, use_global_device_ids",
                    channel_and_groups(p, groups)
                );
                p.generic("stablehlo.all_gather", &attrs);
            }
            Spmd::ReduceScatter { body, axis, groups } => {
                let region = p.region(0, body, 2, &[]);
                let attrs = format!(
                    "{}, scatter_dimension = {axis} : i64, use_global_device_ids",
                    channel_and_groups(p, groups)
                );
                p.generic_with("stablehlo.reduce_scatter", &region, &attrs);
            }
            Spmd::AllToAll {
                split,
                concat,
                groups,
            } => {
                let n = groups.first().map_or(1, Vec::len);
                let attrs = format!(
                    "{}, concat_dimension = {concat} : i64, split_count = {n} : i64, split_dimension = {split} : i64",
                    channel_and_groups(p, groups)
                );
                p.generic("stablehlo.all_to_all", &attrs);
            }
            Spmd::Permute { pairs } => {
                let channel = p.next_channel();
                let attrs = format!(
                    "channel_handle = #stablehlo.channel_handle<handle = {channel}, type = 1>, source_target_pairs = {}",
                    dense_2d(pairs.iter().map(|p| p.to_vec()).collect(), 2)
                );
                p.generic("stablehlo.collective_permute", &attrs);
            }
            Spmd::PartitionId => p.generic("stablehlo.partition_id", ""),
        }
    }

    fn eval(&self, args: &[&Literal], shape: Shape) -> Vec<Literal> {
        match self {
            Spmd::Manual(manual) => {
                let (mesh, ins, outs) = &manual.local();
                run_manual(&manual.body, mesh, ins, outs, args)
            }
            Spmd::AllReduce { body, groups } => {
                let (me, all) = exchange(args[0]);
                vec![fold(body, &group_of(groups, me), &all)]
            }
            Spmd::ReduceScatter { body, axis, groups } => {
                let (me, all) = exchange(args[0]);
                let group = group_of(groups, me);
                let at = group.iter().position(|&d| d == me as i64).unwrap_or(0);
                vec![block(&fold(body, &group, &all), *axis, at, shape)]
            }
            Spmd::AllToAll {
                split,
                concat,
                groups,
            } => {
                let (me, all) = exchange(args[0]);
                let group = group_of(groups, me);
                let at = group.iter().position(|&d| d == me as i64).unwrap_or(0);
                let mut part = args[0].shape().with_dim(*split, shape.dims()[*split]);
                part = part.with_dim(*concat, args[0].shape().dims()[*concat]);
                let parts: Vec<Literal> = (group.iter())
                    .map(|&d| block(&all[d as usize], *split, at, part))
                    .collect();
                vec![concatenate(
                    &parts.iter().collect::<Vec<_>>(),
                    *concat,
                    shape,
                )]
            }
            Spmd::AllGather { axis, groups } => {
                let (me, all) = exchange(args[0]);
                let parts: Vec<&Literal> = group_of(groups, me)
                    .iter()
                    .map(|&d| &all[d as usize])
                    .collect();
                vec![concatenate(&parts, *axis, shape)]
            }
            Spmd::Permute { pairs } => {
                let (me, all) = exchange(args[0]);
                let from = pairs.iter().find(|p| p[1] == me as i64);
                let data = match from {
                    Some(p) => all[p[0] as usize].data().to_vec(),
                    None => vec![0.0; shape.count()],
                };
                vec![Literal::new(shape, data)]
            }
            Spmd::PartitionId => {
                let me = DEVICE.with(|d| d.borrow().as_ref().map_or(0, |d| d.index));
                vec![Literal::new(shape, vec![me as f64])]
            }
        }
    }
}

/// One process's part of a manual computation over `mesh` with these
/// specs ([`Manual::local`]).
pub fn local_parts(mesh: &Mesh, ins: &[Spec], outs: &[Spec]) -> (Mesh, Vec<Spec>, Vec<Spec>) {
    let local = |specs: &[Spec]| -> Vec<Spec> {
        match mesh.spans_processes() {
            false => specs.to_vec(),
            true => (specs.iter())
                .map(|s| s.iter().map(|m| m.and_then(|m| m.checked_sub(1))).collect())
                .collect(),
        }
    };
    (mesh.local(), local(ins), local(outs))
}

/// A manual computation as Shardy's `sdy.manual_computation` over every
/// mesh axis. (Compiling refuses a module without this mesh: radix's
/// `shard_map::check`; a traced program's text still prints it.)
fn print_shardy(p: &mut OpPrinter<'_>, body: &Function, mesh: &Mesh, ins: &[Spec], outs: &[Spec]) {
    let per_value = |specs: &[Spec]| {
        let s: Vec<String> = specs.iter().map(|s| mesh.sdy_sharding(s)).collect();
        format!("#sdy.sharding_per_value<[{}]>", s.join(", "))
    };
    let axes: Vec<String> = (0..mesh.dims().len())
        .map(|m| format!("\"m{m}\""))
        .collect();
    let attrs = format!(
        "in_shardings = {}, manual_axes = #sdy<manual_axes{{{}}}>, out_shardings = {}",
        per_value(ins),
        axes.join(", "),
        per_value(outs)
    );
    let n = body.params.len();
    let region = p.region_ending(0, body, n, &[], "sdy.return");
    let results = manual_results(body, mesh, outs);
    p.multi("sdy.manual_computation", n, &[region], &attrs, &results);
}

/// A manual computation as GSPMD's: each operand constrained to its
/// sharding and made manual (`SPMDFullToShardShape`), a call of the body,
/// each result made whole again (`SPMDShardToFullShape`), as JAX lowers a
/// `shard_map` for GSPMD.
fn print_gspmd(p: &mut OpPrinter<'_>, body: &Function, mesh: &Mesh, ins: &[Spec], outs: &[Spec]) {
    let prefix = p.region_prefix();
    let custom_call = |target: &str, arg: &str, sharding: &str, from: Shape, to: Shape| {
        format!(
            "\"stablehlo.custom_call\"({arg}) {{call_target_name = \"{target}\", mhlo.sharding = \"{sharding}\"}} : ({}) -> {}",
            tensor_type(&from),
            tensor_type(&to)
        )
    };
    let whole_sharding = |s: Shape, spec: &Spec| mesh.sharding(spec, s.dims()).unwrap_or_default();
    let args: Vec<String> = p.arg_names().iter().map(|a| a.to_string()).collect();
    let shapes = p.arg_shapes().to_vec();
    let mut manual = vec![];
    for (i, ((arg, &s), spec)) in args.iter().zip(&shapes).zip(ins).enumerate() {
        let (split, local) = (format!("{prefix}_in{i}"), format!("{prefix}_local{i}"));
        p.line(
            &split,
            &custom_call("Sharding", arg, &whole_sharding(s, spec), s, s),
        );
        let block = body.node(body.params[i]).shape;
        p.line(
            &local,
            &custom_call("SPMDFullToShardShape", &split, "{manual}", s, block),
        );
        manual.push(local);
    }
    let name = crate::private_name("shard_map", body);
    p.private_function(&name, body);
    let blocks = body.result_shapes();
    let call = format!("{prefix}_call");
    let mut text = format!(
        "\"func.call\"({}) {{callee = @{name}}} : (",
        manual.join(", ")
    );
    let params = body.param_shapes();
    text.push_str(
        &params
            .iter()
            .map(tensor_type)
            .collect::<Vec<_>>()
            .join(", "),
    );
    text.push_str(") -> (");
    text.push_str(
        &blocks
            .iter()
            .map(tensor_type)
            .collect::<Vec<_>>()
            .join(", "),
    );
    text.push(')');
    p.line(&format!("{call}:{}", blocks.len()), &text);
    let wholes = manual_results(body, mesh, outs);
    let mut results = vec![];
    for (j, ((&b, &w), spec)) in blocks.iter().zip(&wholes).zip(outs).enumerate() {
        let (kept, out) = (format!("{prefix}_kept{j}"), format!("{prefix}_out{j}"));
        p.line(
            &kept,
            &custom_call("Sharding", &format!("{call}#{j}"), "{manual}", b, b),
        );
        p.line(
            &out,
            &custom_call(
                "SPMDShardToFullShape",
                &kept,
                &whole_sharding(w, spec),
                b,
                w,
            ),
        );
        results.push(out);
    }
    p.name_results(results);
}

/// The whole results of a manual computation of `body`.
fn manual_results(body: &Function, mesh: &Mesh, outs: &[Spec]) -> Vec<Shape> {
    (body.result_shapes().into_iter().zip(outs))
        .map(|(s, spec)| whole_shape(mesh, s, spec).unwrap_or(s))
        .collect()
}

/// The block of a `whole` value split as `spec` that each device holds.
pub fn block_shape(mesh: &Mesh, whole: Shape, spec: &Spec) -> Result<Shape, String> {
    resize(mesh, whole, spec, |d, n| {
        (d % n == 0)
            .then_some(d / n)
            .ok_or_else(|| format!("{whole}: {d} does not split {n} ways"))
    })
}

/// The whole value put together from blocks of type `block` as `spec` says.
pub fn whole_shape(mesh: &Mesh, block: Shape, spec: &Spec) -> Result<Shape, String> {
    resize(mesh, block, spec, |d, n| Ok(d * n))
}

/// `s` with each axis `spec` splits resized by `f(size, devices)`.
fn resize(
    mesh: &Mesh,
    s: Shape,
    spec: &Spec,
    f: impl Fn(i64, i64) -> Result<i64, String>,
) -> Result<Shape, String> {
    if spec.len() != s.rank() {
        return Err(format!("a spec of {} axes for {s}", spec.len()));
    }
    let mut used = vec![false; mesh.dims().len()];
    let mut out = s;
    for (i, m) in spec.iter().enumerate() {
        let Some(m) = *m else { continue };
        let Some(&n) = mesh.dims().get(m) else {
            return Err(format!("no mesh axis {m} in {:?}", mesh.dims()));
        };
        if std::mem::replace(&mut used[m], true) {
            return Err(format!("mesh axis {m} splits two axes of {s}"));
        }
        out = out.with_dim(i, f(s.dims()[i], n as i64)?);
    }
    Ok(out)
}

/// A collective's one operand and the size of its groups, which must be
/// equally long and not empty.
fn collective(args: &[Shape], groups: &Groups) -> Result<(Shape, i64), String> {
    super::arity(args, 1)?;
    check_groups(groups)?;
    Ok((args[0], groups[0].len() as i64))
}

/// That `body` folds two scalars of `x`'s dtype into one.
fn check_reduction(body: &Function, x: Shape) -> Result<(), String> {
    let scalar = Shape::scalar(x.dtype());
    super::signature(body, "reduction", &[scalar, scalar], &[scalar])
}

/// The size of axis `axis` of `x`.
fn dim(x: Shape, axis: usize) -> Result<i64, String> {
    (x.dims().get(axis).copied()).ok_or_else(|| format!("no axis {axis} in {x}"))
}

/// The size of axis `axis` of `x` cut into `n` blocks.
fn split(x: Shape, axis: usize, n: i64) -> Result<i64, String> {
    let d = dim(x, axis)?;
    (d % n == 0)
        .then_some(d / n)
        .ok_or_else(|| format!("axis {axis} of {x} does not split into {n} blocks"))
}

/// The values of the devices of `group` folded elementwise by `body`, in
/// the group's order.
fn fold(body: &Function, group: &[i64], all: &[Literal]) -> Literal {
    let shape = all[group[0] as usize].shape();
    let data = (0..shape.count())
        .map(|i| {
            let mut values = group.iter().map(|&d| all[d as usize].data()[i]);
            let first = values.next().unwrap_or(0.0);
            values.fold(first, |acc, v| apply(body, &[acc, v])[0])
        })
        .collect();
    Literal::new(shape, data)
}

/// Block `k` of `x` along `axis`, of type `part`.
fn block(x: &Literal, axis: usize, k: usize, part: Shape) -> Literal {
    let xs = x.shape();
    let mut start = vec![0; xs.rank()];
    start[axis] = k as i64 * part.dims()[axis];
    let bytes = slice_block(&f64_bytes(x.data()), xs.dims(), 8, &start, part.dims());
    Literal::new(part, from_f64_bytes(&bytes))
}

/// `Err` unless the groups are equally long and none is empty.
fn check_groups(groups: &Groups) -> Result<(), String> {
    let n = groups.first().map_or(0, Vec::len);
    if n == 0 || groups.iter().any(|g| g.len() != n) {
        return Err(format!("groups {groups:?} are not of one nonzero size"));
    }
    Ok(())
}

/// A new channel and `groups` as a collective's attributes.
fn channel_and_groups(p: &mut OpPrinter<'_>, groups: &Groups) -> String {
    let channel = p.next_channel();
    let n = groups.first().map_or(0, Vec::len);
    format!(
        "channel_handle = #stablehlo.channel_handle<handle = {channel}, type = 1>, replica_groups = {}",
        dense_2d(groups.clone(), n)
    )
}

/// `dense<[[a, b], ..]> : tensor<RxCxi64>`.
fn dense_2d(rows: Vec<Vec<i64>>, cols: usize) -> String {
    let text: Vec<String> = rows.iter().map(|r| i64_list(r.iter().copied())).collect();
    format!(
        "dense<[{}]> : tensor<{}x{cols}xi64>",
        text.join(", "),
        rows.len()
    )
}

/// The group device `me` is in (itself alone if none names it).
fn group_of(groups: &Groups, me: usize) -> Vec<i64> {
    groups
        .iter()
        .find(|g| g.contains(&(me as i64)))
        .cloned()
        .unwrap_or_else(|| vec![me as i64])
}

/// Where a thread evaluating a manual computation's body stands.
struct Device {
    index: usize,
    exchange: Arc<Exchange>,
}

thread_local! {
    /// The device this thread evaluates a body for (`None`: not in a
    /// manual computation).
    static DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// What the devices of a manual computation hand each other: each puts its
/// value, all wait, each reads every value, all wait again (so no value is
/// replaced before every device has read it). A device whose body panics
/// breaks it, and every device waiting in it panics too, rather than
/// waiting for a value that never comes.
struct Exchange {
    n: usize,
    state: Mutex<ExchangeState>,
    turn: Condvar,
}

struct ExchangeState {
    values: Vec<Option<Literal>>,
    /// How many devices have arrived at the current wait.
    arrived: usize,
    /// How many waits have ended.
    generation: u64,
    broken: bool,
}

impl Exchange {
    fn new(n: usize) -> Exchange {
        Exchange {
            n,
            state: Mutex::new(ExchangeState {
                values: vec![None; n],
                arrived: 0,
                generation: 0,
                broken: false,
            }),
            turn: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ExchangeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until every device has arrived; panics if one broke it.
    fn wait<'a>(
        &'a self,
        mut state: MutexGuard<'a, ExchangeState>,
    ) -> MutexGuard<'a, ExchangeState> {
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.n {
            state.arrived = 0;
            state.generation += 1;
            self.turn.notify_all();
        }
        while state.generation == generation && !state.broken {
            state = self.turn.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        assert!(!state.broken, "another device's body failed");
        state
    }

    /// Every device's value, `value` being device `index`'s.
    fn all(&self, index: usize, value: &Literal) -> Vec<Literal> {
        let mut state = self.lock();
        state.values[index] = Some(value.clone());
        let state = self.wait(state);
        let all = (state.values.iter())
            .map(|v| v.clone().expect("every device put its value"))
            .collect();
        drop(self.wait(state));
        all
    }

    fn r#break(&self) {
        self.lock().broken = true;
        self.turn.notify_all();
    }
}

/// This thread's device and every device's `value` at this collective.
fn exchange(value: &Literal) -> (usize, Vec<Literal>) {
    DEVICE.with(|d| match d.borrow().as_ref() {
        None => (0, vec![value.clone()]),
        Some(d) => (d.index, d.exchange.all(d.index, value)),
    })
}

/// A manual computation's results: `body` on one thread per device of
/// `mesh`, on that device's blocks.
fn run_manual(
    body: &Function,
    mesh: &Mesh,
    in_specs: &[Spec],
    out_specs: &[Spec],
    args: &[&Literal],
) -> Vec<Literal> {
    let n = mesh.n_devices();
    let exchange = Arc::new(Exchange::new(n));
    let per_device: Vec<Vec<Literal>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..n)
            .map(|index| {
                let exchange = exchange.clone();
                scope.spawn(move || {
                    let blocks: Vec<Literal> = (args.iter().zip(in_specs))
                        .map(|(a, spec)| cut(mesh, a, spec, index))
                        .collect();
                    DEVICE.with(|d| {
                        *d.borrow_mut() = Some(Device {
                            index,
                            exchange: exchange.clone(),
                        })
                    });
                    let res = catch_unwind(AssertUnwindSafe(|| interp::eval(body, &blocks)));
                    res.unwrap_or_else(|p| {
                        exchange.r#break();
                        resume_unwind(p)
                    })
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|p| resume_unwind(p)))
            .collect()
    });
    (out_specs.iter().enumerate())
        .map(|(j, spec)| {
            let block = per_device[0][j].shape();
            let whole = whole_shape(mesh, block, spec).expect("checked when traced");
            let marked = marked(whole, spec);
            let mut bytes = vec![0u8; whole.count() * 8];
            for (d, results) in per_device.iter().enumerate() {
                let (start, size) = mesh.block(&marked, d);
                let src = f64_bytes(results[j].data());
                place_block(&mut bytes, whole.dims(), 8, &start, &size, &src);
            }
            Literal::new(whole, from_f64_bytes(&bytes))
        })
        .collect()
}

/// Device `device`'s block of `whole` split as `spec`.
fn cut(mesh: &Mesh, whole: &Literal, spec: &Spec, device: usize) -> Literal {
    let s = whole.shape();
    let (start, size) = mesh.block(&marked(s, spec), device);
    let bytes = slice_block(&f64_bytes(whole.data()), s.dims(), 8, &start, &size);
    let block = block_shape(mesh, s, spec).expect("checked when traced");
    Literal::new(block, from_f64_bytes(&bytes))
}

/// `s` with its axes marked split as `spec` says.
fn marked(s: Shape, spec: &Spec) -> Shape {
    (spec.iter().enumerate()).fold(s.unsharded(), |s, (i, m)| match m {
        Some(m) => s.shard(i, *m).unwrap_or(s),
        None => s,
    })
}

/// `parts` joined along `axis` into a value of type `shape`.
fn concatenate(parts: &[&Literal], axis: usize, shape: Shape) -> Literal {
    let mut bytes = vec![0u8; shape.count() * 8];
    let mut at = 0;
    for part in parts {
        let ps = part.shape();
        let mut start = vec![0; ps.rank()];
        start[axis] = at;
        place_block(
            &mut bytes,
            shape.dims(),
            8,
            &start,
            ps.dims(),
            &f64_bytes(part.data()),
        );
        at += ps.dims()[axis];
    }
    Literal::new(shape, from_f64_bytes(&bytes))
}

fn f64_bytes(values: &[f64]) -> Vec<u8> {
    encode(DType::F64, values)
}

fn from_f64_bytes(bytes: &[u8]) -> Vec<f64> {
    decode(DType::F64, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that fails leaves no other waiting for its value.
    #[test]
    fn a_failed_device_breaks_the_exchange_instead_of_hanging_its_peers() {
        let exchange = Exchange::new(3);
        let one = Literal::new(Shape::scalar(DType::F32), vec![1.0]);
        let outcomes: Vec<bool> = std::thread::scope(|s| {
            let waiting: Vec<_> = (0..2)
                .map(|i| {
                    let (exchange, one) = (&exchange, &one);
                    s.spawn(move || {
                        catch_unwind(AssertUnwindSafe(|| exchange.all(i, one))).is_err()
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(50));
            exchange.r#break();
            waiting.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(outcomes, [true, true]);
    }

    /// Three devices each get every value, in device order, twice running.
    #[test]
    fn every_device_gets_every_value() {
        let exchange = Exchange::new(3);
        let got: Vec<Vec<f64>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..3)
                .map(|i| {
                    let exchange = &exchange;
                    s.spawn(move || {
                        let v = |k: usize| {
                            Literal::new(Shape::scalar(DType::F32), vec![(10 * k + i) as f64])
                        };
                        let first = exchange.all(i, &v(1));
                        let second = exchange.all(i, &v(2));
                        first.iter().chain(&second).map(|l| l.data()[0]).collect()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(got, vec![vec![10.0, 11.0, 12.0, 20.0, 21.0, 22.0]; 3]);
    }
}
