//! The collectives across 2 and 3 processes over loopback, each against the
//! single-process reference ([`fold`] over every rank's input), bit for
//! bit, and a peer that dies. Each test starts itself as a job: run plainly
//! it launches its own binary as `n` ranks through the pinned `mpiexec`,
//! filtered to itself; run as a rank it does the rank's part.

use std::time::{Duration, Instant};

use half::bf16;
use radix_mpi::{Elem, Error, ReduceOp, fold, launched, run_ranks, world};

/// What a whole job may take, start to end.
const JOB_DEADLINE: Duration = Duration::from_secs(120);

/// Runs the test `name` of this binary as `n` ranks with `env`, and checks
/// that the job succeeded and that every rank in `ranks` said it finished
/// (so a body that never ran cannot pass).
fn run_job(name: &str, n: usize, env: &[(&str, &str)], ranks: &[usize]) {
    let exe = std::env::current_exe().unwrap();
    let out = run_ranks(
        n,
        &exe,
        &[name, "--exact", "--nocapture", "--test-threads=1"],
        env,
        JOB_DEADLINE,
    )
    .unwrap();
    out.check_finished(n, ranks)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Rank `r`'s input of `len` values for case `case`: values that differ
/// per rank and position, and whose sums round.
fn input<T: Elem>(r: usize, case: usize, len: usize, make: fn(f64) -> T) -> Vec<T> {
    (0..len)
        .map(|i| {
            let k = (i * 7919 + r * 104_729 + case * 31) % 2003;
            make((k as f64 - 1000.0) * 0.013_7 + 1.0 / (1.0 + r as f64))
        })
        .collect()
}

fn same_bits<T: Elem + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) {
    let b = |x: &[T]| format!("{x:?}");
    assert!(
        got.len() == want.len()
            && got.iter().zip(want).all(|(a, b)| {
                // Compare the bits: a NaN equals itself here.
                let (pa, pb) = (a as *const T as *const u8, b as *const T as *const u8);
                // SAFETY: both point to one `T`.
                unsafe {
                    std::slice::from_raw_parts(pa, size_of::<T>())
                        == std::slice::from_raw_parts(pb, size_of::<T>())
                }
            }),
        "{what}: got {}, want {}",
        b(got),
        b(want)
    );
}

/// Every collective on one element type, for one rank, against the
/// reference computed from every rank's input.
fn check_type<T: Elem + std::fmt::Debug + PartialEq>(
    name: &str,
    site: &mut u32,
    make: fn(f64) -> T,
) {
    let w = world().unwrap();
    let (rank, n) = (w.rank(), w.size());
    let zero = make(0.0);
    for (case, len) in [1usize, 7, 1031].into_iter().enumerate() {
        let inputs: Vec<Vec<T>> = (0..n).map(|r| input(r, case, len, make)).collect();
        let parts: Vec<&[T]> = inputs.iter().map(|v| v.as_slice()).collect();
        let x = &inputs[rank];
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean] {
            let mut want = vec![zero; len];
            fold(op, &parts, &mut want);
            let mut got = vec![zero; len];
            *site += 1;
            w.all_reduce(*site, op, x, &mut got).unwrap();
            same_bits(&format!("{name} all_reduce {op:?} len {len}"), &got, &want);
        }
        let mut got = vec![zero; len * n];
        *site += 1;
        w.all_gather(*site, x, &mut got).unwrap();
        same_bits(
            &format!("{name} all_gather len {len}"),
            &got,
            &inputs.concat(),
        );
        // reduce_scatter and all_to_all take `n` blocks of `len`.
        let blocks: Vec<Vec<T>> = (0..n).map(|r| input(r, case + 10, len * n, make)).collect();
        let mut got = vec![zero; len];
        *site += 1;
        w.reduce_scatter(*site, ReduceOp::Sum, &blocks[rank], &mut got)
            .unwrap();
        let mine: Vec<&[T]> = blocks.iter().map(|b| &b[rank * len..][..len]).collect();
        let mut want = vec![zero; len];
        fold(ReduceOp::Sum, &mine, &mut want);
        same_bits(&format!("{name} reduce_scatter len {len}"), &got, &want);
        let mut got = vec![zero; len * n];
        *site += 1;
        w.all_to_all(*site, &blocks[rank], &mut got).unwrap();
        let want: Vec<T> = (0..n)
            .flat_map(|r| blocks[r][rank * len..][..len].to_vec())
            .collect();
        same_bits(&format!("{name} all_to_all len {len}"), &got, &want);
        // A shift by one, and a permutation that leaves rank 0 out.
        let shift: Vec<(usize, usize)> = (0..n).map(|r| (r, (r + 1) % n)).collect();
        let mut got = vec![zero; len];
        *site += 1;
        w.permute(*site, &shift, x, &mut got).unwrap();
        same_bits(
            &format!("{name} ppermute len {len}"),
            &got,
            &inputs[(rank + n - 1) % n],
        );
        let partial = [(0usize, 1usize)];
        *site += 1;
        w.permute(*site, &partial, x, &mut got).unwrap();
        let want = if rank == 1 {
            inputs[0].clone()
        } else {
            vec![zero; len]
        };
        same_bits(&format!("{name} partial ppermute len {len}"), &got, &want);
    }
}

#[test]
fn collectives_equal_the_reference_bit_for_bit() {
    let name = "collectives_equal_the_reference_bit_for_bit";
    if !launched() {
        for n in [2, 3] {
            run_job(
                name,
                n,
                &[("RADIX_MPI_TIMEOUT", "60")],
                &(0..n).collect::<Vec<_>>(),
            );
        }
        return;
    }
    let w = world().unwrap();
    assert!(w.uses_mpi());
    let mut site = 0;
    check_type::<f32>("f32", &mut site, |x| x as f32);
    check_type::<bf16>("bf16", &mut site, bf16::from_f64);
    check_type::<i32>("i32", &mut site, |x| (x * 1000.0) as i32);
    // The same site again, many times in a row, as a loop runs it.
    for i in 0..50 {
        let x = [w.rank() as i32 + i];
        let mut out = [0];
        w.all_reduce(1_000_000, ReduceOp::Sum, &x, &mut out)
            .unwrap();
        let n = w.size() as i32;
        assert_eq!(out[0], n * (n - 1) / 2 + n * i);
    }
    radix_mpi::say_finished(w.rank(), w.size());
}

#[test]
fn a_dead_peer_is_an_error_within_the_deadline() {
    let name = "a_dead_peer_is_an_error_within_the_deadline";
    if !launched() {
        run_job(name, 2, &[("RADIX_MPI_TIMEOUT", "3")], &[0]);
        return;
    }
    let w = world().unwrap();
    if w.rank() == 1 {
        // Gone without a word, as a crashed process is.
        // SAFETY: ends this process at once.
        unsafe { libc::_exit(0) };
    }
    let start = Instant::now();
    let mut out = [0f32; 4];
    let err = w
        .all_reduce(7, ReduceOp::Sum, &[1.0; 4], &mut out)
        .unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(&err, Error::Timeout { peers, rank: 0, .. } if peers == &[1]),
        "{err}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(20),
        "{took:?}"
    );
    // MPI is not touched again: the next collective fails at once.
    let err = w.all_gather(8, &[1u8], &mut [0u8; 2]).unwrap_err();
    assert!(matches!(err, Error::Broken(_)), "{err}");
    println!("rank {} of {} finished: {}", w.rank(), w.size(), err);
}

#[test]
fn a_process_started_alone_is_a_world_of_one() {
    if launched() {
        return;
    }
    let w = world().unwrap();
    assert_eq!((w.rank(), w.size(), w.uses_mpi()), (0, 1, false));
    let mut out = [0i32; 3];
    w.all_reduce(1, ReduceOp::Mean, &[4, 5, 6], &mut out)
        .unwrap();
    assert_eq!(out, [4, 5, 6]);
    let err = w.permute(2, &[(0, 1)], &[1], &mut out[..1]).unwrap_err();
    assert!(err.to_string().contains("outside 0..1"), "{err}");
}
