//! `shard_map` on 4 CPU devices: a function run per device on its blocks,
//! with collectives between the devices, against the same computation
//! written out on the host, and against the reference interpreter (which
//! runs the body on a thread per device); partitioned by Shardy and by
//! GSPMD alike.

use std::sync::OnceLock;

use radix::collective::ReduceOp;
use radix::shard_map::{
    Spec, all_gather, all_reduce, all_to_all, axis_index, ppermute, reduce_scatter, shard_map,
};
use radix::sharding::{Mesh, Partitioner};
use radix::{
    Buffer, CacheMode, CompileConfig, DType, Element, Error, Literal, Platform, Program, Shape,
    Tensor,
};
use radix_pjrt::OpenOptions;
use radix_pjrt::provision::Target;

/// A CPU client with 4 devices partitioned over a mesh of `dims`.
fn meshed(dims: &[usize]) -> Platform {
    static PLATFORM: OnceLock<Platform> = OnceLock::new();
    let cpu4 = PLATFORM.get_or_init(|| {
        Platform::open(&OpenOptions {
            cpu_devices: Some(4),
            ..OpenOptions::target(Target::Cpu)
        })
        .unwrap_or_else(|e| panic!("no 4-device CPU platform: {e}"))
    });
    cpu4.with_mesh(Mesh::new(dims)).unwrap()
}

/// `program` compiled for `platform` with `partitioner`, no cache.
fn build(
    platform: &Platform,
    program: Program,
    partitioner: Partitioner,
) -> radix::Result<radix::Executable> {
    let mut config = CompileConfig::new(platform);
    config.cache = CacheMode::Disabled;
    config.partitioner = partitioner;
    radix::compile_program_with(platform, program, &config)
}

/// `f` of one f32 input `x` (values `v(i)` for element `i`), traced,
/// compiled for `platform` and run; and its interpreted results, which
/// must be equal (sums of a few small integers: exact in f32).
fn run(
    platform: &Platform,
    x: Shape,
    v: impl Fn(usize) -> f32,
    f: impl FnOnce(Tensor) -> Vec<Tensor>,
) -> Vec<Vec<f32>> {
    run_as::<f32>(platform, x, |i| f64::from(v(i)), f)
        .into_iter()
        .map(|r| r.into_iter().map(|v| v as f32).collect())
        .collect()
}

/// [`run`] with `x` of element type `T` (`x`'s dtype), valued by `v(i)`
/// rounded to `T`; each result's values as f64 (exactly: every element
/// type here is one f64 holds).
fn run_as<T: Element>(
    platform: &Platform,
    x: Shape,
    v: impl Fn(usize) -> f64,
    f: impl FnOnce(Tensor) -> Vec<Tensor>,
) -> Vec<Vec<f64>> {
    let values: Vec<T> = (0..x.count()).map(|i| T::from_f64(v(i))).collect();
    let as_f64 = |values: Vec<T>| values.into_iter().map(T::to_f64).collect::<Vec<f64>>();
    let program = radix::trace_fn(&Tensor::param(x), f).unwrap();
    let interpreted: Vec<Vec<f64>> = program
        .interpret(&[Literal::from_slice(&values, x.dims())])
        .iter()
        .map(|l| as_f64(l.to_vec::<T>()))
        .collect();
    let xb = Buffer::from_slice(platform, &values, x).unwrap();
    for partitioner in [Partitioner::Shardy, Partitioner::Gspmd] {
        let exe = build(platform, program.clone(), partitioner).unwrap();
        let got: Vec<Vec<f64>> = exe
            .call(&[&xb])
            .unwrap()
            .iter()
            .map(|b| as_f64(b.to_vec::<T>().unwrap()))
            .collect();
        assert_eq!(got, interpreted, "{partitioner:?} against the interpreter");
    }
    interpreted
}

fn spec(axes: &[Option<usize>]) -> Spec {
    axes.to_vec()
}

#[test]
fn each_device_sums_its_rows_and_the_sums_are_added() {
    let platform = meshed(&[4]);
    let x = Shape::new(DType::F32, &[8, 3]);
    let mesh = Mesh::new(&[4]);
    let got = run(
        &platform,
        x,
        |i| i as f32,
        |x| {
            shard_map(
                &mesh,
                &[spec(&[Some(0), None])],
                &[spec(&[None]), spec(&[Some(0)])],
                &[x],
                |b| {
                    let local = b[0].sum(0);
                    let mean = all_reduce(b[0].max(0), ReduceOp::Mean, &[0]);
                    vec![all_reduce(local, ReduceOp::Sum, &[0]), mean]
                },
            )
        },
    );
    // Column j sums i*3 + j over rows i = 0..8.
    let want: Vec<f32> = (0..3)
        .map(|j| (0..8).map(|i| (i * 3 + j) as f32).sum())
        .collect();
    assert_eq!(got[0], want);
    // Device d's largest row is 2d + 1; the mean of those over the 4
    // devices, the same on each: row 4 in the mean, 12 + j.
    let mean: Vec<f32> = (0..3).map(|j| 12.0 + j as f32).collect();
    assert_eq!(
        got[1],
        [mean.clone(), mean.clone(), mean.clone(), mean].concat()
    );
}

#[test]
fn a_two_by_two_mesh_reduces_gathers_and_permutes_along_one_axis() {
    let platform = meshed(&[2, 2]);
    let x = Shape::new(DType::F32, &[4, 6]);
    let mesh = Mesh::new(&[2, 2]);
    let both = spec(&[Some(0), Some(1)]);
    let got = run(
        &platform,
        x,
        |i| (i % 7) as f32,
        |x| {
            shard_map(
                &mesh,
                std::slice::from_ref(&both),
                &[spec(&[Some(0), None]), both.clone(), both.clone()],
                &[x],
                |b| {
                    // Each device's block is 2x3: summed with its neighbour along
                    // mesh axis 1, then the sums gathered back along it (the same
                    // on both, so the result is whole along axis 1).
                    let summed = all_reduce(b[0], ReduceOp::Sum, &[1]);
                    let gathered = all_gather(summed, 1, 1);
                    let at = (axis_index(0) * 10.0 + axis_index(1)).convert(DType::F32);
                    let index = b[0] * 0.0 + at.broadcast_left(b[0].shape());
                    let swapped = ppermute(b[0], 0, &[(0, 1), (1, 0)]);
                    vec![gathered, index, swapped]
                },
            )
        },
    );
    let x: Vec<f32> = (0..24).map(|i| (i % 7) as f32).collect();
    let at = |r: usize, c: usize| x[r * 6 + c];
    // Rows r: the two column blocks (c and c + 3) summed, then gathered.
    let gathered: Vec<f32> = (0..4)
        .flat_map(|r| (0..6).map(move |c| (r, c % 3)))
        .map(|(r, c)| at(r, c) + at(r, c + 3))
        .collect();
    assert_eq!(got[0], gathered);
    let index: Vec<f32> = (0..4)
        .flat_map(|r| (0..6).map(move |c| ((r / 2) * 10 + c / 3) as f32))
        .collect();
    assert_eq!(got[1], index);
    // The two row blocks trade places.
    let swapped: Vec<f32> = (0..4)
        .flat_map(|r| (0..6).map(move |c| ((r + 2) % 4, c)))
        .map(|(r, c)| at(r, c))
        .collect();
    assert_eq!(got[2], swapped);
}

#[test]
fn bf16_and_i32_blocks_of_odd_length_go_through_every_collective() {
    every_collective_on::<half::bf16>();
    every_collective_on::<i32>();
}

/// Each collective over 4 devices on blocks of element type `T`, rows of
/// 5 (odd) elements: the plugin's results, under both partitioners, equal
/// the interpreter's and the host's, bit for bit. The values are small
/// integers, so every sum is exact in bf16 too and its order cannot show.
fn every_collective_on<T: Element>() {
    let platform = meshed(&[4]);
    let mesh = Mesh::new(&[4]);
    // x [4, 4, 5]: device d's block is x[d], 4 rows of 5.
    let v = |i: usize| ((i * 7) % 11) as f64 - 5.0;
    let at = |d: usize, r: usize, c: usize| v(d * 20 + r * 5 + c);
    let blocks = spec(&[Some(0), None, None]);
    let got = run_as::<T>(&platform, Shape::new(T::DTYPE, &[4, 4, 5]), v, |x| {
        shard_map(
            &mesh,
            std::slice::from_ref(&blocks),
            &vec![blocks.clone(); 7],
            &[x],
            |b| {
                let b = b[0];
                vec![
                    all_reduce(b, ReduceOp::Sum, &[0]),
                    all_reduce(b, ReduceOp::Max, &[0]),
                    all_reduce(b, ReduceOp::Min, &[0]),
                    reduce_scatter(b, ReduceOp::Sum, 1, 0),
                    all_to_all(b, 1, 0, 0),
                    all_gather(b, 2, 0),
                    ppermute(b, 0, &[(0, 1), (1, 2), (2, 3), (3, 0)]),
                ]
            },
        )
    });
    let name = format!("{:?}", T::DTYPE);
    let devices = || 0..4usize;
    // Every device's (r, c) over the devices, on each device.
    let over = |pick: fn(f64, f64) -> f64| -> Vec<f64> {
        let one: Vec<f64> = (0..20)
            .map(|i| devices().map(|e| at(e, i / 5, i % 5)).reduce(pick).unwrap())
            .collect();
        one.repeat(4)
    };
    assert_eq!(got[0], over(|a, b| a + b), "{name} sum");
    assert_eq!(got[1], over(f64::max), "{name} max");
    assert_eq!(got[2], over(f64::min), "{name} min");
    // Device d keeps row d of the sum.
    let scattered: Vec<f64> = (devices().flat_map(|d| (0..5).map(move |c| (d, c))))
        .map(|(d, c)| devices().map(|e| at(e, d, c)).sum())
        .collect();
    assert_eq!(got[3], scattered, "{name} reduce_scatter");
    // Device d gets row d of every device's block, in the devices' order.
    let moved: Vec<f64> = (devices().flat_map(|d| devices().map(move |e| (d, e))))
        .flat_map(|(d, e)| (0..5).map(move |c| at(e, d, c)))
        .collect();
    assert_eq!(got[4], moved, "{name} all_to_all");
    // Each row of every device's block side by side, on each device.
    let gathered: Vec<f64> = (0..4)
        .flat_map(|r| devices().flat_map(move |e| (0..5).map(move |c| at(e, r, c))))
        .collect::<Vec<f64>>()
        .repeat(4);
    assert_eq!(got[5], gathered, "{name} all_gather");
    // Device d gets the block of device d - 1.
    let shifted: Vec<f64> = (devices().flat_map(|d| (0..20).map(move |i| ((d + 3) % 4, i))))
        .map(|(e, i)| at(e, i / 5, i % 5))
        .collect();
    assert_eq!(got[6], shifted, "{name} ppermute");
}

#[test]
fn the_module_holds_a_manual_computation_with_its_collectives() {
    let mesh = Mesh::new(&[4]);
    let program = radix::trace_fn(&Tensor::param(Shape::new(DType::F32, &[8])), |x| {
        shard_map(&mesh, &[spec(&[Some(0)])], &[spec(&[Some(0)])], &[x], |b| {
            vec![all_reduce(b[0], ReduceOp::Sum, &[0])]
        })[0]
    })
    .unwrap();
    let gspmd = program.clone().with_partitioner(Partitioner::Gspmd);
    let gspmd = gspmd.with_mesh(mesh.clone()).unwrap();
    let gspmd = gspmd.stablehlo_without_locations();
    for part in [
        "call_target_name = \"SPMDFullToShardShape\", mhlo.sharding = \"{manual}\"",
        "call_target_name = \"SPMDShardToFullShape\", mhlo.sharding = \"{devices=[4]<=[4]}\"",
        "func.func private @shard_map_",
        "\"stablehlo.all_reduce\"",
    ] {
        assert!(gspmd.contains(part), "no {part} in\n{gspmd}");
    }
    let text = program.with_mesh(mesh).unwrap();
    let text = text.stablehlo_without_locations();
    for part in [
        "\"sdy.manual_computation\"(%arg0)",
        "manual_axes = #sdy<manual_axes{\"m0\"}>",
        "in_shardings = #sdy.sharding_per_value<[<@mesh, [{\"m0\"}]>]>",
        "\"stablehlo.all_reduce\"",
        "replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>",
        "\"sdy.return\"",
    ] {
        assert!(text.contains(part), "no {part} in\n{text}");
    }
}

#[test]
fn misuse_is_an_error_naming_it() {
    let x = Tensor::param(Shape::new(DType::F32, &[6]));
    let mesh = Mesh::new(&[4]);
    // A collective outside shard_map.
    let e = radix::trace_fn(&x, |x| all_reduce(x, ReduceOp::Sum, &[0])).unwrap_err();
    assert!(e.to_string().contains("outside shard_map"), "{e}");
    // The identity per device, rows split 4 ways.
    let rows = |x: Tensor| {
        shard_map(&mesh, &[spec(&[Some(0)])], &[spec(&[Some(0)])], &[x], |b| {
            b.to_vec()
        })[0]
    };
    // 6 rows do not split 4 ways.
    let e = radix::trace_fn(&x, rows).unwrap_err();
    assert!(e.to_string().contains("does not split 4 ways"), "{e}");
    // No mesh axis 1.
    let x8 = Tensor::param(Shape::new(DType::F32, &[8]));
    let e = radix::trace_fn(&x8, |x| {
        shard_map(&mesh, &[spec(&[Some(0)])], &[spec(&[Some(0)])], &[x], |b| {
            vec![all_reduce(b[0], ReduceOp::Sum, &[1])]
        })[0]
    })
    .unwrap_err();
    assert!(e.to_string().contains("mesh axes [1]"), "{e}");
    // Compiled for another mesh.
    let program = radix::trace_fn(&x8, rows).unwrap();
    let other = match build(&meshed(&[2]), program.clone(), Partitioner::Shardy) {
        Err(e) => e,
        Ok(_) => panic!("compiled for a mesh of 2"),
    };
    assert!(
        matches!(other, Error::Sharding(_)) && other.to_string().contains("shard_map at"),
        "{other}"
    );
}

/// `f` of two f32 inputs compiled for `platform` and run, with `x` and
/// `w` valued by `vx` and `vw`: each result's values.
fn run2(
    platform: &Platform,
    (x, vx): (Shape, &[f32]),
    (w, vw): (Shape, &[f32]),
    f: impl FnOnce(Tensor, Tensor) -> Vec<Tensor>,
) -> Vec<Vec<f32>> {
    let program = radix::trace_fn(&(Tensor::param(x), Tensor::param(w)), |(x, w)| f(x, w)).unwrap();
    let xb = Buffer::from_slice(platform, vx, x).unwrap();
    let wb = Buffer::from_slice(platform, vw, w).unwrap();
    let runs: Vec<Vec<Vec<f32>>> = [Partitioner::Shardy, Partitioner::Gspmd]
        .into_iter()
        .map(|partitioner| {
            let exe = build(platform, program.clone(), partitioner).unwrap();
            let out = exe.call(&[&xb, &wb]).unwrap();
            out.iter().map(|b| b.to_vec::<f32>().unwrap()).collect()
        })
        .collect();
    assert_eq!(runs[0], runs[1], "Shardy's run against GSPMD's");
    runs.into_iter().next().unwrap()
}

/// A loss written per device over rows of `x` split on a mesh of 4, with
/// every collective that has a derivative on the way.
fn per_device_loss(x: Tensor, w: Tensor) -> Tensor {
    let mesh = Mesh::new(&[4]);
    let rows = spec(&[Some(0), None]);
    let out = shard_map(
        &mesh,
        &[rows.clone(), spec(&[None])],
        &[spec(&[None]), rows],
        &[x, w],
        |b| {
            let (x, w) = (b[0], b[1]);
            let h = (x * w.broadcast_right(x.shape())).tanh();
            // Every device's rows, then each device's block of their sum with
            // the rows of its neighbour.
            let all = all_gather(h, 0, 0);
            let mine = radix::shard_map::reduce_scatter(all * all, ReduceOp::Sum, 0, 0);
            let next = ppermute(x, 0, &[(0, 1), (1, 2), (2, 3), (3, 0)]);
            // Device d gets row block d of every device's (equal) `all`.
            let moved = radix::shard_map::all_to_all(all, 0, 1, 0);
            let local =
                (mine * 4.0 + h * next).sum(0) + moved.sum([0, 1]).broadcast_left(w.shape());
            vec![all_reduce(local, ReduceOp::Sum, &[0]), h]
        },
    );
    out[0].sum(0) + out[1].sin().sum([0, 1])
}

/// The same loss written for one device.
fn whole_loss(x: Tensor, w: Tensor) -> Tensor {
    let h = (x * w.broadcast_right(x.shape())).tanh();
    let next = Tensor::concatenate(&[x.slice(0, 6..8), x.slice(0, 0..6)], 0);
    // The sum-scatter of h² over 4 devices, each of the 4 blocks taken
    // 4 times (once per device's gather), then summed over devices.
    let squares = (h * h).sum(0) * 4.0 * 4.0;
    let moved = h.sum([0, 1]).broadcast_left(w.shape()) * 4.0;
    let local = squares + (h * next).sum(0) + moved;
    local.sum(0) + h.sin().sum([0, 1])
}

#[test]
fn the_gradient_of_a_per_device_loss_equals_the_whole_ones() {
    let x = Shape::new(DType::F32, &[8, 3]);
    let w = Shape::new(DType::F32, &[3]);
    let vx: Vec<f32> = (0..24).map(|i| ((i * 7) % 11) as f32 * 0.1 - 0.5).collect();
    let vw = [0.5f32, -1.25, 2.0];
    let grads = |platform: &Platform, loss: fn(Tensor, Tensor) -> Tensor| {
        run2(platform, (x, &vx), (w, &vw), |x, w| {
            let value = loss(x, w);
            let (gx, gw) = radix::grad(|p: &(Tensor, Tensor), _: &()| loss(p.0, p.1), &(x, w), &());
            vec![value, gx, gw]
        })
    };
    let per_device = grads(&meshed(&[4]), per_device_loss);
    let whole = grads(&radix::testing::platform(), whole_loss);
    for (got, want) in per_device.iter().zip(&whole) {
        // Sums of up to 24 terms of size ~10 in f32, in other orders.
        let tol = |w: f32| 1e-5 * 24.0 * (1.0 + w.abs()) * 10.0;
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= tol(*w), "{got:?}\nagainst\n{want:?}");
        }
    }
}

#[test]
fn a_collective_inside_a_loop_meets_its_peers_every_iteration() {
    let platform = meshed(&[4]);
    let mesh = Mesh::new(&[4]);
    let got = run(
        &platform,
        Shape::new(DType::F32, &[4]),
        |i| i as f32,
        |x| {
            shard_map(&mesh, &[spec(&[Some(0)])], &[spec(&[Some(0)])], &[x], |b| {
                // Three times: the sum over the devices, plus this device's index.
                let (last, _) = radix::for_(3, "step", &[b[0]], |_, s| {
                    let next =
                        all_reduce(s[0], ReduceOp::Sum, &[0]) + axis_index(0).convert(DType::F32);
                    (vec![next], vec![])
                });
                last
            })
        },
    );
    // x = 0, 1, 2, 3: the sums are 6, then 24 + 6 = 30, then 120 + 6 = 126.
    assert_eq!(got[0], [126.0, 127.0, 128.0, 129.0]);
}
