//! The collectives across processes as custom calls whose kernels call MPI
//! (`radix_mpi`), in a block layout the public functions reshape to:
//!
//! | call | operand | result |
//! |---|---|---|
//! | `all_reduce` | `x` | `x`'s shape |
//! | `all_gather` | `x` | `[n, ..x]`, rank `i`'s `x` at `i` |
//! | `reduce_scatter` | `[n, ..r]` | `r` |
//! | `all_to_all` | `[n, ..r]` | `[n, ..r]`, block `i` from rank `i` |
//! | `ppermute` | `x` | `x`'s shape |
//! | `axis_index` | none | `i32` scalar |
//!
//! Every call but `axis_index` also takes an order token (a `u8` scalar)
//! as its second operand and gives one as its last result: the collectives
//! of a block are chained in tracing order, so XLA runs them in that order
//! on every rank, and never waits in one collective for a peer that waits
//! in another (mpi4jax's tokens, here implicit).
//!
//! Each has attributes `size` (the number of processes it was traced for)
//! and `site` (its call site's number in the trace, the tag of its
//! messages). Inside a `shard_map` over several devices a call takes the
//! device's index (a `u32` scalar) as its third operand, and `devices`
//! says how many there are: device `d` exchanges with device `d` of every
//! other process, under tag `site · devices + d`. The kernel is the
//! reference semantics too: in a process
//! started alone it runs in a world of one. Each differentiable call has a
//! twin without a derivative (`….t`) that its derivative uses, so that
//! tracing a derivative does not trace another one without end.

use std::sync::LazyLock;

use half::{bf16, f16};
use radix_mpi::{Elem, ReduceOp};

use crate::custom_call::{AttrValue, Attrs, CustomCall, Kernel};
use crate::{DType, Element, Shape, Tensor};

/// Which collective a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Ppermute,
    AxisIndex,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::AllToAll => "all_to_all",
            Kind::Ppermute => "ppermute",
            Kind::AxisIndex => "axis_index",
        }
    }
}

/// The implementation version of every collective's kernel.
const VERSION: u32 = 1;

macro_rules! decl {
    ($name:ident, $kind:expr, $derivative:expr) => {
        pub(crate) static $name: LazyLock<CustomCall> = LazyLock::new(|| {
            let b = CustomCall::builder(
                &format!("radix.mpi.{}", $kind.name()),
                VERSION,
                |shapes, attrs| shape_rule($kind, shapes, attrs),
                |k| run($kind, k),
            )
            .side_effect()
            .derivative($derivative);
            b.register().expect("the collectives are declared once")
        });
    };
    ($name:ident, $kind:expr) => {
        pub(crate) static $name: LazyLock<CustomCall> = LazyLock::new(|| {
            CustomCall::builder(
                &format!("radix.mpi.{}.t", $kind.name()),
                VERSION,
                |shapes, attrs| shape_rule($kind, shapes, attrs),
                |k| run($kind, k),
            )
            .side_effect()
            .register()
            .expect("the collectives are declared once")
        });
    };
}

// The vjp of a sum over processes is a sum of the cotangents over them; of
// a mean, their mean; of a gather, the sum of each rank's block; of an
// all-to-all, an all-to-all back; of a permutation, the inverse one. The
// order token's cotangent is the token itself (an integer's cotangent is
// ignored; it only has to have the token's shape).
decl!(ALL_REDUCE, Kind::AllReduce, |x, _, g, attrs| {
    cotangents(emit_like(&ALL_REDUCE_T, g[0], attrs.clone(), x), x)
});
decl!(ALL_GATHER, Kind::AllGather, |x, _, g, attrs| {
    let attrs = attrs.clone().with("op", "sum");
    cotangents(emit_like(&REDUCE_SCATTER_T, g[0], attrs, x), x)
});
decl!(REDUCE_SCATTER, Kind::ReduceScatter, |x, _, g, attrs| {
    let gathered = emit_like(&ALL_GATHER_T, g[0], attrs.clone(), x);
    let mean = attrs.str("op") == Ok("mean");
    let n = attrs.i64("size").unwrap_or(1) as f64;
    cotangents(if mean { gathered / n } else { gathered }, x)
});
decl!(ALL_TO_ALL, Kind::AllToAll, |x, _, g, attrs| {
    cotangents(emit_like(&ALL_TO_ALL_T, g[0], attrs.clone(), x), x)
});
decl!(PPERMUTE, Kind::Ppermute, |x, _, g, attrs| {
    let inverse: Vec<i64> = match attrs.get("pairs") {
        Some(AttrValue::I64s(p)) => p.chunks(2).flat_map(|p| [p[1], p[0]]).collect(),
        _ => vec![],
    };
    let attrs = attrs.clone().with("pairs", inverse);
    cotangents(emit_like(&PPERMUTE_T, g[0], attrs, x), x)
});
decl!(ALL_REDUCE_T, Kind::AllReduce);
decl!(ALL_GATHER_T, Kind::AllGather);
decl!(REDUCE_SCATTER_T, Kind::ReduceScatter);
decl!(ALL_TO_ALL_T, Kind::AllToAll);
decl!(PPERMUTE_T, Kind::Ppermute);
decl!(AXIS_INDEX, Kind::AxisIndex);

/// Records `call(x, order token)` with `attrs` and a new call site, the
/// token being the block's last collective's (or a new one), and makes
/// its result token the block's. Inside a `shard_map` over several
/// devices, the call also takes the device's index (and `attrs` says how
/// many devices there are): each device exchanges with the same device of
/// the other processes, under a tag of its own.
#[track_caller]
pub(crate) fn emit(call: &CustomCall, x: Tensor, attrs: Attrs) -> Tensor {
    let device = crate::shard_map::device_index();
    emit_with(call, x, attrs, device)
}

/// [`emit`] of a derivative: on the device of the call `x` are the
/// operands of (whose rule runs outside any `shard_map` being traced).
#[track_caller]
fn emit_like(call: &CustomCall, x: Tensor, attrs: Attrs, operands: &[Tensor]) -> Tensor {
    let devices = attrs.i64("devices").ok();
    let device = devices.zip(operands.get(2).copied());
    emit_with(call, x, attrs, device.map(|(n, d)| (n as usize, d)))
}

#[track_caller]
fn emit_with(
    call: &CustomCall,
    x: Tensor,
    attrs: Attrs,
    device: Option<(usize, Tensor)>,
) -> Tensor {
    let attrs = attrs.with("site", crate::tensor::next_site() as i64);
    let token = crate::tensor::order_token().unwrap_or_else(|| Tensor::scalar(0.0, DType::U8));
    let res = match device {
        Some((n, device)) => call.call(&[x, token, device], &attrs.with("devices", n as i64)),
        None => call.call(&[x, token], &attrs),
    };
    if let Some(&t) = res.get(1) {
        crate::tensor::set_order_token(t);
    }
    res[0]
}

/// The cotangents of a collective's `operands` with `ct` the first's: the
/// order token's and the device index's are themselves (an integer's
/// cotangent is ignored; it only has to have the operand's shape).
fn cotangents(ct: Tensor, operands: &[Tensor]) -> Vec<Tensor> {
    let mut cts = vec![ct];
    cts.extend_from_slice(&operands[1..]);
    cts
}

/// Records `axis_index` (no messages, so no token).
#[track_caller]
pub(crate) fn emit_axis_index(attrs: Attrs) -> Tensor {
    let attrs = attrs.with("site", crate::tensor::next_site() as i64);
    AXIS_INDEX.call(&[], &attrs)[0]
}

fn shape_rule(kind: Kind, shapes: &[Shape], attrs: &Attrs) -> Result<Vec<Shape>, String> {
    let n = attrs.i64("size")?;
    if kind == Kind::AxisIndex {
        return Ok(vec![Shape::scalar(DType::I32)]);
    }
    let devices = attrs.i64("devices").is_ok();
    let (x, token) = match shapes {
        [x, token] if !devices => (x, token),
        [x, token, device] if devices => {
            if *device != Shape::scalar(DType::U32) {
                return Err(format!("the device index is {device}, not a u32 scalar"));
            }
            (x, token)
        }
        _ => {
            return Err(format!(
                "takes an operand, an order token{}, not {} operands",
                if devices { " and a device index" } else { "" },
                shapes.len()
            ));
        }
    };
    if token.dtype() != DType::U8 || token.rank() != 0 {
        return Err(format!("the order token is {token}, not a u8 scalar"));
    }
    let token = Shape::scalar(DType::U8);
    if x.dtype() == DType::Bool {
        return Err("moves numbers, not bools (convert to u8)".into());
    }
    let dims = x.dims();
    let untagged = |d: &[i64]| Shape::new(x.dtype(), d);
    match kind {
        Kind::AllReduce | Kind::Ppermute => Ok(vec![untagged(dims), token]),
        Kind::AllGather => Ok(vec![untagged(&[&[n][..], dims].concat()), token]),
        Kind::ReduceScatter | Kind::AllToAll => {
            if dims.first() != Some(&n) {
                return Err(format!("wants {n} blocks in axis 0, has shape {dims:?}"));
            }
            Ok(vec![
                untagged(if kind == Kind::AllToAll {
                    dims
                } else {
                    &dims[1..]
                }),
                token,
            ])
        }
        Kind::AxisIndex => unreachable!("answered above"),
    }
}

/// The kernel: checks that the job is the one the call was traced for,
/// then runs the collective on the element type.
fn run(kind: Kind, k: &Kernel<'_>) -> Result<(), String> {
    let world = radix_mpi::world().map_err(|e| e.to_string())?;
    let size = k.attrs().i64("size")?;
    if size != world.size() as i64 {
        return Err(format!(
            "radix.mpi.{} was traced for {size} processes but runs in a job of {}",
            kind.name(),
            world.size()
        ));
    }
    if kind == Kind::AxisIndex {
        k.output::<i32>(0)?[0] = world.rank() as i32;
        return Ok(());
    }
    let dtype = k.input_shape(0).ok_or("no operand")?.dtype();
    match dtype {
        DType::F32 => typed::<f32>(kind, world, k),
        DType::F64 => typed::<f64>(kind, world, k),
        DType::BF16 => typed::<bf16>(kind, world, k),
        DType::F16 => typed::<f16>(kind, world, k),
        DType::I8 => typed::<i8>(kind, world, k),
        DType::I16 => typed::<i16>(kind, world, k),
        DType::I32 => typed::<i32>(kind, world, k),
        DType::I64 => typed::<i64>(kind, world, k),
        DType::U8 => typed::<u8>(kind, world, k),
        DType::U16 => typed::<u16>(kind, world, k),
        DType::U32 => typed::<u32>(kind, world, k),
        DType::U64 => typed::<u64>(kind, world, k),
        other => Err(format!("radix.mpi.{} does not move {other}", kind.name())),
    }
}

fn typed<T: Element + Elem>(
    kind: Kind,
    world: &radix_mpi::World,
    k: &Kernel<'_>,
) -> Result<(), String> {
    // Each device of a `shard_map` exchanges under a tag of its own.
    let site = match k.attrs().i64("devices") {
        Ok(n) => k.attrs().i64("site")? * n + i64::from(k.input::<u32>(2)?[0]),
        Err(_) => k.attrs().i64("site")?,
    } as u32;
    let (x, y) = (k.input::<T>(0)?, k.output::<T>(0)?);
    k.output::<u8>(1)?[0] = 0;
    let op = || {
        let name = k.attrs().str("op")?;
        ReduceOp::from_name(name).ok_or_else(|| format!("no reduction {name:?}"))
    };
    let res = match kind {
        Kind::AllReduce => world.all_reduce(site, op()?, x, y),
        Kind::AllGather => world.all_gather(site, x, y),
        Kind::ReduceScatter => world.reduce_scatter(site, op()?, x, y),
        Kind::AllToAll => world.all_to_all(site, x, y),
        Kind::Ppermute => {
            let pairs = match k.attrs().get("pairs") {
                Some(AttrValue::I64s(p)) => p
                    .chunks(2)
                    .map(|p| (p[0] as usize, p[1] as usize))
                    .collect::<Vec<_>>(),
                _ => return Err("no pairs".into()),
            };
            world.permute(site, &pairs, x, y)
        }
        Kind::AxisIndex => unreachable!("answered in run"),
    };
    res.map_err(|e| e.to_string())
}
