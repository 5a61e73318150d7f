//! Collectives across processes inside compiled programs: 2 and 3
//! processes over loopback, one CPU device each, every collective against
//! the single-process reference (`radix_mpi::fold` over every rank's input,
//! laid out on the host), bit for bit, for f32, bf16 and i32 and odd sizes;
//! a collective inside `for_`; `grad` through `all_reduce`; a dead peer.
//!
//! Each test starts itself as a job: run plainly, it launches its own
//! binary as `n` ranks through the pinned `mpiexec`, filtered to itself;
//! run as a rank (`radix_mpi::launched`), it does the rank's part and says
//! that it finished.

use std::time::{Duration, Instant};

use half::bf16;
use radix::collective::{
    ReduceOp, all_gather, all_reduce, all_reduce_tree, all_to_all, axis_index, ppermute,
    process_count, process_index, reduce_scatter,
};
use radix::testing::run;
use radix::{DType, Element, Literal, Tensor};
use radix_mpi::{Elem, fold, launched, run_test_as_ranks};

/// What a whole job may take, start to end (each rank compiles its programs).
const JOB_DEADLINE: Duration = Duration::from_secs(240);

/// Runs the test `name` of this binary as `n` ranks with `env`, and checks
/// that the job succeeded and that each rank of `ranks` finished.
fn run_job(name: &str, n: usize, env: &[(&str, &str)], ranks: &[usize]) {
    let out = run_test_as_ranks(name, n, env, JOB_DEADLINE).unwrap();
    out.check_finished(n, ranks)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The body of a test that runs as 2 and 3 ranks.
fn as_jobs(name: &str, body: impl FnOnce()) {
    as_jobs_with(name, &[], body);
}

/// [`as_jobs`] with more variables in the ranks' environment.
fn as_jobs_with(name: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    if !launched() {
        let env = [&[("RADIX_MPI_TIMEOUT", "60")], env].concat();
        for n in [2, 3] {
            run_job(name, n, &env, &(0..n).collect::<Vec<_>>());
        }
        return;
    }
    body();
    let (r, n) = (process_index().unwrap(), process_count().unwrap());
    radix_mpi::say_finished(r, n);
}

/// Rank `r`'s `len` values for case `case`, different per rank and place,
/// with sums that round.
fn input<T: Element>(r: usize, case: usize, len: usize) -> Vec<T> {
    (0..len)
        .map(|i| {
            let k = (i * 7919 + r * 104_729 + case * 31) % 2003;
            let v = (k as f64 - 1000.0) * 0.013_7 + 1.0 / (1.0 + r as f64);
            T::from_f64(if T::DTYPE.is_float() { v } else { v * 1000.0 })
        })
        .collect()
}

/// Every rank's `parts` reduced with `op`, as the collectives must give
/// them: [`fold`], the single-process reference.
fn folded<T: Elem + Clone>(op: ReduceOp, parts: &[Vec<T>]) -> Vec<T> {
    let parts: Vec<&[T]> = parts.iter().map(|p| p.as_slice()).collect();
    let mut want = parts[0].to_vec();
    fold(op, &parts, &mut want);
    want
}

/// `got` and `want` hold the same bits (f64 holds these types exactly).
fn same<T: Element>(what: &str, got: &Literal, want: &[T]) {
    let got: Vec<u64> = got
        .to_vec::<T>()
        .iter()
        .map(|v| v.to_f64().to_bits())
        .collect();
    let want: Vec<u64> = want.iter().map(|v| v.to_f64().to_bits()).collect();
    assert_eq!(got, want, "{what}");
}

/// Every collective on one dtype: `x` is `[6, 5]` (6 rows split over 2 or
/// 3 ranks), `y` is `[7]`.
fn every_collective<T: Element + Elem>() {
    let (me, n) = (process_index().unwrap(), process_count().unwrap());
    let xs: Vec<Vec<T>> = (0..n).map(|r| input(r, 1, 30)).collect();
    let ys: Vec<Vec<T>> = (0..n).map(|r| input(r, 2, 7)).collect();
    let lits = [
        Literal::from_slice(&xs[me], &[6, 5]),
        Literal::from_slice(&ys[me], &[7]),
    ];
    let out = run(&lits, |a| {
        let (x, y) = (a[0], a[1]);
        vec![
            all_reduce(x, ReduceOp::Sum),
            all_reduce(x, ReduceOp::Max),
            all_reduce(x, ReduceOp::Min),
            all_reduce(x, ReduceOp::Mean),
            all_reduce(y, ReduceOp::Sum),
            all_gather(x, 1),
            all_gather(y, 0),
            reduce_scatter(x, ReduceOp::Sum, 0),
            all_to_all(x, 0, 1),
            ppermute(y, &(0..n).map(|r| (r, (r + 1) % n)).collect::<Vec<_>>()),
            axis_index(),
        ]
    })
    .unwrap();
    let name = T::DTYPE;
    let reduce = folded::<T>;
    for (i, op) in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean]
        .into_iter()
        .enumerate()
    {
        same(
            &format!("{name} all_reduce {op:?}"),
            &out[i],
            &reduce(op, &xs),
        );
    }
    same(
        &format!("{name} all_reduce [7]"),
        &out[4],
        &reduce(ReduceOp::Sum, &ys),
    );
    // Concatenated along axis 1: row i is every rank's row i in turn.
    let gathered: Vec<T> = (0..6)
        .flat_map(|i| xs.iter().flat_map(move |x| x[i * 5..][..5].to_vec()))
        .collect();
    same(&format!("{name} all_gather axis 1"), &out[5], &gathered);
    same(&format!("{name} all_gather [7]"), &out[6], &ys.concat());
    // Rows cut into n blocks; this rank's block summed over ranks.
    let b = 6 / n;
    let mine: Vec<Vec<T>> = xs
        .iter()
        .map(|x| x[me * b * 5..][..b * 5].to_vec())
        .collect();
    same(
        &format!("{name} reduce_scatter"),
        &out[7],
        &reduce(ReduceOp::Sum, &mine),
    );
    // Rank i's block `me`, concatenated along axis 1.
    let moved: Vec<T> = (0..b)
        .flat_map(|row| mine.iter().flat_map(move |m| m[row * 5..][..5].to_vec()))
        .collect();
    same(&format!("{name} all_to_all"), &out[8], &moved);
    same(&format!("{name} ppermute"), &out[9], &ys[(me + n - 1) % n]);
    same::<i32>("axis_index", &out[10], &[me as i32]);
}

#[test]
fn collectives_equal_the_reference_bit_for_bit() {
    as_jobs("collectives_equal_the_reference_bit_for_bit", || {
        every_collective::<f32>();
        every_collective::<bf16>();
        every_collective::<i32>();
    });
}

/// The ranks of these jobs share this host, so the collectives use the
/// caller's memory; with `RADIX_MPI_STAGED` they copy into buffers of their
/// own, as across hosts, and must give the same bits.
#[test]
fn staged_collectives_equal_the_reference_bit_for_bit() {
    let name = "staged_collectives_equal_the_reference_bit_for_bit";
    as_jobs_with(name, &[("RADIX_MPI_STAGED", "1")], || {
        every_collective::<f32>();
        every_collective::<i32>();
    });
}

/// `all_reduce_tree` joins a tree's tensors of each dtype into one
/// all-reduce: every tensor, of any shape and dtype, comes back in its
/// place with the bits its own all-reduce gives.
#[test]
fn a_trees_all_reduce_is_each_tensors() {
    as_jobs("a_trees_all_reduce_is_each_tensors", || {
        let (me, n) = (process_index().unwrap(), process_count().unwrap());
        let a: Vec<Vec<f32>> = (0..n).map(|r| input(r, 3, 12)).collect();
        let b: Vec<Vec<bf16>> = (0..n).map(|r| input(r, 4, 5)).collect();
        let c: Vec<Vec<f32>> = (0..n).map(|r| input(r, 5, 1)).collect();
        let d: Vec<Vec<i32>> = (0..n).map(|r| input(r, 6, 7)).collect();
        let lits = [
            Literal::from_slice(&a[me], &[3, 4]),
            Literal::from_slice(&b[me], &[5]),
            Literal::from_slice(&c[me], &[]),
            Literal::from_slice(&d[me], &[7, 1]),
        ];
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            let out = run(&lits, |x| all_reduce_tree(&x.to_vec(), op)).unwrap();
            same(&format!("tree f32 [3, 4] {op:?}"), &out[0], &folded(op, &a));
            same(&format!("tree bf16 [5] {op:?}"), &out[1], &folded(op, &b));
            same(&format!("tree f32 scalar {op:?}"), &out[2], &folded(op, &c));
            same(&format!("tree i32 [7, 1] {op:?}"), &out[3], &folded(op, &d));
            for (got, lit) in out.iter().zip(&lits) {
                assert_eq!(got.shape(), lit.shape(), "a tree's tensor keeps its shape");
            }
        }
    });
}

#[test]
fn a_collective_inside_for_() {
    as_jobs("a_collective_inside_for_", || {
        let (me, n) = (process_index().unwrap(), process_count().unwrap());
        let starts: Vec<Vec<f32>> = (0..n).map(|r| input(r, 3, 5)).collect();
        let out = run(&[Literal::from_slice(&starts[me], &[5])], |a| {
            let (state, _) = radix::for_(4, "step", &[a[0]], |_, s| {
                (vec![s[0] + all_reduce(s[0], ReduceOp::Sum) * 0.5], vec![])
            });
            state[0]
        })
        .unwrap();
        // The same steps on the host, every rank's state at once.
        let mut states = starts;
        for _ in 0..4 {
            let parts: Vec<&[f32]> = states.iter().map(|s| s.as_slice()).collect();
            let mut sum = vec![0f32; 5];
            fold(ReduceOp::Sum, &parts, &mut sum);
            for s in &mut states {
                for (v, t) in s.iter_mut().zip(&sum) {
                    *v += t * 0.5;
                }
            }
        }
        same("for_ with all_reduce", &out[0], &states[me]);
    });
}

#[test]
fn grad_through_all_reduce_is_the_single_process_gradient() {
    as_jobs(
        "grad_through_all_reduce_is_the_single_process_gradient",
        || {
            // The job's loss is Σ_r sum(all_reduce(x_r) · c_r); its gradient
            // with respect to each rank's x is Σ_r c_r.
            let (me, n) = (process_index().unwrap(), process_count().unwrap());
            let cs: Vec<Vec<f32>> = (0..n).map(|r| input(r, 4, 9)).collect();
            let x: Vec<f32> = input(me, 5, 9);
            let out = run(
                &[
                    Literal::from_slice(&x, &[9]),
                    Literal::from_slice(&cs[me], &[9]),
                ],
                |a| {
                    radix::grad(
                        |x: &Tensor, c: &Tensor| (all_reduce(*x, ReduceOp::Sum) * *c).sum(0),
                        &a[0],
                        &a[1],
                    )
                },
            )
            .unwrap();
            let parts: Vec<&[f32]> = cs.iter().map(|c| c.as_slice()).collect();
            let mut want = vec![0f32; 9];
            fold(ReduceOp::Sum, &parts, &mut want);
            same("grad of all_reduce", &out[0], &want);
        },
    );
}

#[test]
fn data_parallel_gradients_are_the_global_batchs() {
    as_jobs("data_parallel_gradients_are_the_global_batchs", || {
        // Each rank holds 4 of the global batch's n × 4 examples; its loss
        // is its examples' mean square error, and the gradients' mean over
        // ranks is the gradient of the global batch's mean.
        let (me, n) = (process_index().unwrap(), process_count().unwrap());
        let w: Vec<f32> = input(0, 7, 4);
        let xs: Vec<Vec<f32>> = (0..n).map(|r| input(r, 8, 4)).collect();
        let ys: Vec<Vec<f32>> = (0..n).map(|r| input(r, 9, 4)).collect();
        let loss = |w: &Tensor, b: &(Tensor, Tensor)| {
            let d = b.0 * w.broadcast_right(b.0.shape()) - b.1;
            (d * d).mean((0..b.0.rank()).collect::<Vec<usize>>())
        };
        let local = run(
            &[
                Literal::from_slice(&w, &[4]),
                Literal::from_slice(&xs[me], &[4]),
                Literal::from_slice(&ys[me], &[4]),
            ],
            |a| all_reduce_tree(&radix::grad(loss, &a[0], &(a[1], a[2])), ReduceOp::Mean),
        )
        .unwrap();
        let global = run(
            &[
                Literal::from_slice(&w, &[4]),
                Literal::from_slice(&xs.concat(), &[n as i64, 4]),
                Literal::from_slice(&ys.concat(), &[n as i64, 4]),
            ],
            |a| radix::grad(loss, &a[0], &(a[1], a[2])),
        )
        .unwrap();
        radix::testing::assert_all_close(
            "data-parallel gradient",
            &local[0].to_vec::<f32>(),
            &global[0].to_vec::<f32>(),
            radix::testing::Tol::sum(DType::F32, 4 * n, 1000.0),
        );
    });
}

#[test]
fn a_dead_peer_makes_the_call_an_error_within_the_deadline() {
    let name = "a_dead_peer_makes_the_call_an_error_within_the_deadline";
    if !launched() {
        run_job(name, 2, &[("RADIX_MPI_TIMEOUT", "3")], &[0]);
        return;
    }
    let platform = radix::testing::platform();
    let x = Tensor::param(radix::Shape::new(DType::F32, &[4]));
    let exe = radix::compile_fn(&platform, &x, |x| all_reduce(x, ReduceOp::Sum)).unwrap();
    if process_index().unwrap() == 1 {
        // Gone without a word, as a crashed process is.
        // SAFETY: ends this process at once.
        unsafe { libc_exit() };
    }
    let input =
        radix::Buffer::from_literal(&platform, &Literal::from_slice(&[1f32; 4], &[4])).unwrap();
    let start = Instant::now();
    let err = exe.call(&(), input).map(|_| ()).unwrap_err().to_string();
    let took = start.elapsed();
    assert!(err.contains("did not answer"), "{err}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    println!("rank 0 of 2 finished: {err}");
}

/// `_exit(0)`: ends the process without running exit hooks (MPI's finalize).
unsafe fn libc_exit() -> ! {
    unsafe extern "C" {
        fn _exit(status: i32) -> !;
    }
    // SAFETY: ends the process at once.
    unsafe { _exit(0) }
}

#[test]
fn a_process_started_alone_is_a_job_of_one() {
    if launched() {
        return;
    }
    assert_eq!((process_index().unwrap(), process_count().unwrap()), (0, 1));
    // Whole numbers, so that the loss's sum is exact in any order.
    let x: Vec<f32> = vec![1.0, -2.0, 3.0, 4.0, -5.0, 6.0];
    let out = run(&[Literal::from_slice(&x, &[2, 3])], |a| {
        let x = a[0];
        let (loss, dx) = radix::value_and_grad(
            |x: &Tensor, _: &()| {
                let moved = all_to_all(all_gather(*x, 1), 1, 0);
                (reduce_scatter(ppermute(moved, &[(0, 0)]), ReduceOp::Mean, 0) * 2.0)
                    .sum(0)
                    .sum(0)
            },
            &x,
            &(),
        );
        vec![all_reduce(x, ReduceOp::Max), axis_index(), loss, dx]
    })
    .unwrap();
    same("all_reduce alone", &out[0], &x);
    same::<i32>("axis_index alone", &out[1], &[0]);
    same("loss alone", &out[2], &[x.iter().sum::<f32>() * 2.0]);
    same("gradient alone", &out[3], &[2f32; 6]);
}

#[test]
fn misused_collectives_are_trace_errors_at_the_callers_line() {
    if launched() {
        return;
    }
    let x = [Literal::from_slice(&[1f32, 2.0], &[2])];
    let err = run(&x, |a| all_gather(a[0], 1)).unwrap_err().to_string();
    assert!(
        err.contains("axis 1 of a rank-1 tensor") && err.contains("collectives.rs"),
        "{err}"
    );
    let err = run(&x, |a| ppermute(a[0], &[(0, 1)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("outside 0..1"), "{err}");
    let err = run(&x, |a| {
        radix::grad(
            |x: &Tensor, _: &()| all_reduce(*x, ReduceOp::Max).sum(0),
            &a[0],
            &(),
        )
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("radix.mpi.all_reduce.t"), "{err}");
}

#[test]
fn a_program_over_several_devices_is_refused() {
    if launched() {
        return;
    }
    let platform = radix::testing::platform()
        .with_mesh(radix::sharding::Mesh::new(&[2]))
        .unwrap();
    let x = Tensor::param(radix::Shape::new(DType::F32, &[4]));
    let err = radix::compile_fn(&platform, &x, |x| all_reduce(x, ReduceOp::Sum))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("partitioned over 2 devices"), "{err}");
}

#[test]
fn independent_collectives_are_chained_in_tracing_order() {
    if launched() {
        return;
    }
    let x = [
        Literal::from_slice(&[1f32, 2.0], &[2]),
        Literal::from_slice(&[3f32], &[1]),
    ];
    let program = radix::testing::trace_fn(&x, |a| {
        vec![all_reduce(a[0], ReduceOp::Sum), all_gather(a[1], 0)]
    })
    .unwrap()
    .optimize();
    let text = program.stablehlo_without_locations();
    let calls: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("stablehlo.custom_call"))
        .collect();
    assert_eq!(calls.len(), 2, "{text}");
    // The gather takes the reduction's token: `%<reduction>#1`.
    let first = calls[0].trim().split(':').next().unwrap().trim();
    let first = first.trim_start_matches('%').split(' ').next().unwrap();
    assert!(calls[0].contains("radix.mpi.all_reduce"), "{text}");
    assert!(calls[1].contains(&format!("%{first}#1")), "{text}");
}
