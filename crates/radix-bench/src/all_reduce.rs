//! `radix-bench all-reduce`: one `radix::collective::all_reduce` (sum) of
//! an f32 vector between processes on this machine, inside a compiled
//! program (its kernel calls MPI through `radix_mpi`), the input resident
//! on the device. Run plainly, it starts itself as a job of `ranks`
//! processes through the pinned `mpiexec` and prints rank 0's report;
//! `bench/peers/mpi_allreduce.py` times mpi4py's `Allreduce` of the same
//! vector between as many processes, on the same mpich build.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use radix::collective::{ReduceOp, all_reduce, process_count, process_index};
use radix::{Buffer, DType, Platform, Shape, Tensor};
use serde_json::json;

use crate::measure::{Report, time_per_call};

/// How long the whole job may take (each rank compiles one small program).
const JOB_DEADLINE: Duration = Duration::from_secs(300);

/// What one rank times and how.
pub struct Args {
    pub ranks: usize,
    pub mib: usize,
    pub samples: usize,
    pub calls_per_sample: usize,
}

/// As a rank, its report (`None` on the ranks but 0, which print none);
/// otherwise starts the job of `args.ranks` processes and prints rank 0's
/// report line itself (`None`).
pub fn all_reduce_bench(args: &Args) -> Result<Option<Report>> {
    if !radix_mpi::launched() {
        println!("{}", launch(args)?);
        return Ok(None);
    }
    let (rank, n) = (process_index()?, process_count()?);
    ensure!(n == args.ranks, "a job of {n} ranks, {} asked", args.ranks);
    let len = args.mib * (1 << 20) / size_of::<f32>();
    let shape = Shape::new(DType::F32, &[len as i64]);
    let platform = Platform::cpu()?;
    let exe = radix::compile_fn(&platform, &Tensor::param(shape), |x| {
        all_reduce(x, ReduceOp::Sum)
    })?;
    // Rank r holds r + i / len: the sum is known exactly (small integers
    // plus a fraction of at most 24 bits, summed over few ranks).
    let x: Vec<f32> = (0..len)
        .map(|i| rank as f32 + (i % 1024) as f32 / 1024.0)
        .collect();
    let x = Buffer::from_slice(&platform, &x, shape)?;
    let sum = exe.call_fn(x.clone())?.to_vec::<f32>()?;
    let ranks_sum = (n * (n - 1) / 2) as f32;
    for (i, &s) in sum.iter().enumerate() {
        let want = ranks_sum + n as f32 * (i % 1024) as f32 / 1024.0;
        ensure!(s == want, "element {i} of the sum is {s}, not {want}");
    }
    let mut values = vec![];
    // Two samples warm the pool, MPI's connections and the caches.
    for _ in 0..args.samples + 2 {
        let t = time_per_call(args.calls_per_sample, || exe.call_fn(x.clone()).map(drop))?;
        values.push(t * 1e3);
    }
    let mut report = Report::new("all_reduce");
    report.samples(
        &format!("radix all_reduce {} MiB {n} ranks", args.mib),
        "ms",
        &values[2..],
    );
    report.meta("ranks", json!(n));
    report.meta("bytes", json!(len * size_of::<f32>()));
    report.meta("calls_per_sample", json!(args.calls_per_sample));
    if let Some(Ok(version)) = radix_mpi::world()?.library_version() {
        report.meta("mpi", json!(version.lines().next().unwrap_or_default()));
    }
    // Only rank 0 reports.
    Ok((rank == 0).then_some(report))
}

/// Runs this binary with the same arguments as `args.ranks` ranks and
/// returns rank 0's report line.
fn launch(args: &Args) -> Result<String> {
    let exe = std::env::current_exe()?;
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = radix_mpi::run_ranks(args.ranks, &exe, &argv, &[], JOB_DEADLINE)
        .context("the all-reduce job")?;
    if !out.status.success() {
        bail!(
            "the all-reduce job failed ({}):\n{}",
            out.status,
            out.stderr
        );
    }
    let line = out
        .stdout
        .lines()
        .rev()
        .find(|l| l.contains("\"bench\":\"all_reduce\""))
        .with_context(|| format!("rank 0 printed no report:\n{}", out.stdout))?;
    Ok(line.to_string())
}
