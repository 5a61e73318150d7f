//! A mesh of 2 processes × 2 devices each: a `shard_map` over each
//! process's 2 CPU devices whose body exchanges between its devices
//! (`radix::shard_map`'s collectives) and between processes
//! (`radix::collective`'s, over MPI: each device with the same device of
//! the other process), against the whole computation written out on the
//! host. The test starts itself as a job of 2 ranks through the pinned
//! `mpiexec`.

use std::time::Duration;

use radix::collective::{ReduceOp, process_count, process_index};
use radix::shard_map::shard_map;
use radix::sharding::{Mesh, Partitioner};
use radix::{Buffer, CacheMode, CompileConfig, DType, Platform, Shape, Tensor};
use radix_mpi::{launched, run_test_as_ranks};
use radix_pjrt::OpenOptions;
use radix_pjrt::provision::Target;

/// What the job may take, start to end (each rank compiles its programs).
const JOB_DEADLINE: Duration = Duration::from_secs(240);

/// Rank `r`'s input: 4 rows of 3.
fn input(r: usize) -> Vec<f32> {
    (0..12).map(|i| (i + 100 * r) as f32).collect()
}

/// The body of a test that runs as a job of 2 ranks: run plainly, the
/// test starts itself as the job and checks that both ranks finished; as
/// a rank, it runs `body(rank, ranks)`.
fn as_job(name: &str, body: impl FnOnce(usize, usize)) {
    if !launched() {
        let env = [("RADIX_MPI_TIMEOUT", "60")];
        let out = run_test_as_ranks(name, 2, &env, JOB_DEADLINE).unwrap();
        out.check_finished(2, &[0, 1])
            .unwrap_or_else(|e| panic!("{e}"));
        return;
    }
    let (rank, n) = (process_index().unwrap(), process_count().unwrap());
    body(rank, n);
    radix_mpi::say_finished(rank, n);
}

/// A CPU platform of 2 devices.
fn cpu2() -> Platform {
    Platform::open(&OpenOptions {
        cpu_devices: Some(2),
        ..OpenOptions::target(Target::Cpu)
    })
    .unwrap()
}

#[test]
fn two_processes_of_two_devices_reduce_and_gather_across_both() {
    as_job(
        "two_processes_of_two_devices_reduce_and_gather_across_both",
        two_processes_of_two_devices,
    );
}

fn two_processes_of_two_devices(rank: usize, n: usize) {
    let platform = cpu2().with_mesh(Mesh::new(&[2])).unwrap();
    let mesh = Mesh::new(&[2]);
    let x = Shape::new(DType::F32, &[4, 3]);
    let program = radix::trace_fn(&Tensor::param(x), |x| {
        let rows = vec![Some(0), None];
        shard_map(
            &mesh,
            std::slice::from_ref(&rows),
            &[vec![None], rows.clone(), vec![Some(0)]],
            &[x],
            |b| {
                // Each device's 2 rows summed, over this process's devices,
                // then over the processes: the sum of all 16 rows' columns.
                let devices = radix::shard_map::all_reduce(b[0].sum(0), ReduceOp::Sum, &[0]);
                let total = radix::collective::all_reduce(devices, ReduceOp::Sum);
                // This device's rows of every process, process after process.
                let gathered = radix::collective::all_gather(b[0], 0);
                let index =
                    radix::collective::axis_index() * 10.0 + radix::shard_map::axis_index(0);
                vec![total, gathered, index.convert(DType::F32).reshape(&[1])]
            },
        )
    })
    .unwrap();
    for partitioner in [Partitioner::Shardy, Partitioner::Gspmd] {
        let mut config = CompileConfig::new(&platform);
        config.cache = CacheMode::Disabled;
        config.partitioner = partitioner;
        let exe = radix::compile_program_with(&platform, program.clone(), &config).unwrap();
        let xb = Buffer::from_slice(&platform, &input(rank), x).unwrap();
        let got: Vec<Vec<f32>> = (exe.call(&[&xb]).unwrap().iter())
            .map(|b| b.to_vec::<f32>().unwrap())
            .collect();
        let inputs: Vec<Vec<f32>> = (0..n).map(input).collect();
        let total: Vec<f32> = (0..3)
            .map(|c| {
                inputs
                    .iter()
                    .flat_map(|x| (0..4).map(move |r| x[r * 3 + c]))
                    .sum()
            })
            .collect();
        assert_eq!(got[0], total, "{partitioner:?}");
        // Device d holds rows 2d, 2d + 1 of each process: gathered, rank
        // 0's then rank 1's, and the devices' blocks one after the other.
        let gathered: Vec<f32> = (0..2)
            .flat_map(|d| (0..n).map(move |p| (d, p)))
            .flat_map(|(d, p)| input(p)[d * 6..d * 6 + 6].to_vec())
            .collect();
        assert_eq!(got[1], gathered, "{partitioner:?}");
        assert_eq!(
            got[2],
            [10.0 * rank as f32, 10.0 * rank as f32 + 1.0],
            "{partitioner:?}"
        );
    }
    // Outside a shard_map, a collective across processes in a program
    // over 2 devices is refused by name.
    let outside = radix::trace_fn(&Tensor::param(x), |x| {
        radix::collective::all_reduce(x, ReduceOp::Sum)
    })
    .unwrap();
    let e = match radix::compile_program(&platform, outside) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("compiled a collective outside shard_map over 2 devices"),
    };
    assert!(e.contains("inside a shard_map"), "{e}");
}

#[test]
fn a_mesh_spanning_two_processes_of_two_devices_and_its_gradient() {
    as_job(
        "a_mesh_spanning_two_processes_of_two_devices_and_its_gradient",
        a_mesh_spanning_processes,
    );
}

fn a_mesh_spanning_processes(rank: usize, n: usize) {
    let mesh = Mesh::spanning_processes(2, &[2]);
    // The automatic partitioner cannot cross processes here.
    let cpu2 = cpu2();
    let Err(e) = cpu2.with_mesh(mesh.clone()) else {
        panic!("a mesh spanning processes was taken");
    };
    assert!(e.to_string().contains("cannot cross processes"), "{e}");
    let platform = cpu2.with_mesh(mesh.local()).unwrap();
    // Each process's block of a [2, 4, 3] x: [1, 4, 3], its rows over its
    // 2 devices; w [3] the same everywhere.
    let (x, w) = (
        Shape::new(DType::F32, &[1, 4, 3]),
        Shape::new(DType::F32, &[3]),
    );
    let loss = |x: Tensor, w: Tensor| {
        let specs = [vec![Some(0), Some(1), None], vec![None]];
        shard_map(
            &mesh,
            &specs,
            &[vec![None], vec![Some(0), Some(1)]],
            &[x, w],
            |b| {
                let h = (b[0] * b[1].broadcast_right(b[0].shape())).tanh();
                let total = radix::shard_map::all_reduce(h.sum([0, 1]), ReduceOp::Sum, &[0, 1]);
                let at = radix::shard_map::axis_index(0) * 10.0 + radix::shard_map::axis_index(1);
                vec![total, at.convert(DType::F32).reshape(&[1, 1])]
            },
        )
    };
    let program = radix::trace_fn(&(Tensor::param(x), Tensor::param(w)), |(x, w)| {
        let out = loss(x, w);
        let (gx, gw) = radix::grad(
            |p: &(Tensor, Tensor), _: &()| loss(p.0, p.1)[0].sum(0),
            &(x, w),
            &(),
        );
        vec![out[0], out[1], gx, gw]
    })
    .unwrap();
    let vw = [0.5f32, -0.25, 0.125];
    let xs: Vec<Vec<f32>> = (0..n)
        .map(|r| input(r).iter().map(|v| v * 0.01).collect())
        .collect();
    let exe = radix::compile_program(&platform, program).unwrap();
    let xb = Buffer::from_slice(&platform, &xs[rank], x).unwrap();
    let wb = Buffer::from_slice(&platform, &vw, w).unwrap();
    let got: Vec<Vec<f32>> = (exe.call(&[&xb, &wb]).unwrap().iter())
        .map(|b| b.to_vec::<f32>().unwrap())
        .collect();
    // On the host, in f64: h = tanh(x w), its column sums over all 8 rows,
    // d/dx = w (1 - h²) of this process's rows, d/dw = Σ x (1 - h²).
    let h = |r: usize, i: usize| (f64::from(xs[r][i]) * f64::from(vw[i % 3])).tanh();
    let total: Vec<f64> = (0..3)
        .map(|c| {
            (0..n)
                .flat_map(|r| (0..4).map(move |k| (r, k * 3 + c)))
                .map(|(r, i)| h(r, i))
                .sum()
        })
        .collect();
    let gx: Vec<f64> = (0..12)
        .map(|i| f64::from(vw[i % 3]) * (1.0 - h(rank, i).powi(2)))
        .collect();
    let gw: Vec<f64> = (0..3)
        .map(|c| {
            (0..n)
                .flat_map(|r| (0..4).map(move |k| (r, k * 3 + c)))
                .map(|(r, i)| f64::from(xs[r][i]) * (1.0 - h(r, i).powi(2)))
                .sum()
        })
        .collect();
    // f32 tanh and sums of up to 8 terms of size ~1: 1e-5 is dozens of ulps.
    let close = |got: &[f32], want: &[f64]| {
        got.len() == want.len()
            && got
                .iter()
                .zip(want)
                .all(|(g, w)| (f64::from(*g) - w).abs() <= 1e-5 * (1.0 + w.abs()))
    };
    assert!(close(&got[0], &total), "{:?} against {total:?}", got[0]);
    assert_eq!(got[1], [10.0 * rank as f32, 10.0 * rank as f32 + 1.0]);
    assert!(close(&got[2], &gx), "{:?} against {gx:?}", got[2]);
    assert!(close(&got[3], &gw), "{:?} against {gw:?}", got[3]);
}
