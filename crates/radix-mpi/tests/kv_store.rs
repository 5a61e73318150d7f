//! The job's key-value store across 2 and 3 processes over loopback: every
//! rank's keys reach every other rank, from several threads at once;
//! missing keys are reported as missing; and a dead rank 0 is an error
//! within the deadline, not a hang. Each test starts itself as a job, as
//! `collectives.rs` does.

use std::time::{Duration, Instant};

use radix_mpi::{Error, ReduceOp, kv_store, launched, run_test_as_ranks, world};

/// What a whole job may take, start to end.
const JOB_DEADLINE: Duration = Duration::from_secs(120);

/// Runs the test `name` of this binary as `n` ranks with `env`, and checks
/// that the job succeeded and that every rank in `ranks` said it finished.
fn run_job(name: &str, n: usize, env: &[(&str, &str)], ranks: &[usize]) {
    let out = run_test_as_ranks(name, n, env, JOB_DEADLINE).unwrap();
    out.check_finished(n, ranks)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Rank `r`'s value for key number `i`: lengths from 0 up, every byte value.
fn value(r: usize, i: usize) -> Vec<u8> {
    (0..(r * 3001 + i * 17) % 5000)
        .map(|k| (k * 31 + r * 7 + i) as u8)
        .collect()
}

#[test]
fn every_rank_gets_every_ranks_keys() {
    let name = "every_rank_gets_every_ranks_keys";
    if !launched() {
        for n in [2, 3] {
            let ranks: Vec<usize> = (0..n).collect();
            run_job(name, n, &[("RADIX_MPI_TIMEOUT", "30")], &ranks);
        }
        return;
    }
    let w = world().unwrap();
    let (rank, n) = (w.rank(), w.size());
    let store = kv_store().unwrap();
    store
        .put(format!("rank/{rank}").as_bytes(), &value(rank, 0))
        .unwrap();
    for p in 0..n {
        let got = store
            .get(format!("rank/{p}").as_bytes(), Duration::from_secs(30))
            .unwrap();
        assert_eq!(got, value(p, 0), "rank {rank}: the value of rank/{p}");
    }
    // Found at once now that it is there; a key no one puts is missing.
    let next = format!("rank/{}", (rank + 1) % n);
    assert_eq!(
        store.try_get(next.as_bytes()).unwrap(),
        Some(value((rank + 1) % n, 0))
    );
    assert_eq!(store.try_get(b"nobody puts this").unwrap(), None);
    let start = Instant::now();
    let err = store
        .get(b"nobody puts this", Duration::from_millis(300))
        .unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(&err, Error::KeyNotPut { key, .. } if key == "nobody puts this"),
        "{err}"
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // Several threads at once, as the plugin calls: each puts its keys and
    // waits for the other ranks' same-numbered keys, which may not be put yet.
    std::thread::scope(|s| {
        for t in 1..5 {
            s.spawn(move || {
                let key = |r: usize| format!("thread/{t}/rank/{r}");
                store.put(key(rank).as_bytes(), &value(rank, t)).unwrap();
                for p in (0..n).rev() {
                    let got = store
                        .get(key(p).as_bytes(), Duration::from_secs(30))
                        .unwrap();
                    assert_eq!(got, value(p, t), "rank {rank}: the value of {}", key(p));
                }
            });
        }
    });
    // A put replaces the value, for every rank.
    let mut all = [0i32];
    w.all_reduce(1, ReduceOp::Sum, &[1], &mut all).unwrap();
    if rank == n - 1 {
        store.put(b"shared", b"second").unwrap();
    }
    if rank == 0 {
        store.put(b"shared", b"first").unwrap();
    }
    w.all_reduce(2, ReduceOp::Sum, &[1], &mut all).unwrap();
    if rank == 0 {
        store.put(b"shared", b"second").unwrap();
    }
    w.all_reduce(3, ReduceOp::Sum, &[1], &mut all).unwrap();
    assert_eq!(
        store.try_get(b"shared").unwrap().as_deref(),
        Some(&b"second"[..])
    );
    // Rank 0 stays until every rank is done with the store.
    w.all_reduce(4, ReduceOp::Sum, &[1], &mut all).unwrap();
    assert_eq!(all[0], n as i32);
    radix_mpi::say_finished(rank, n);
}

#[test]
fn a_dead_rank_0_is_an_error_within_the_deadline() {
    let name = "a_dead_rank_0_is_an_error_within_the_deadline";
    if !launched() {
        run_job(name, 3, &[("RADIX_MPI_TIMEOUT", "3")], &[1, 2]);
        return;
    }
    let w = world().unwrap();
    let store = kv_store().unwrap();
    let mut one = [0i32];
    w.all_reduce(1, ReduceOp::Sum, &[1], &mut one).unwrap();
    if w.rank() == 0 {
        // Gone without a word, as a crashed process is.
        // SAFETY: ends this process at once.
        unsafe { libc::_exit(0) };
    }
    let start = Instant::now();
    let err = store
        .get(b"rank 0 knows", Duration::from_secs(60))
        .unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(&err, Error::Timeout { what, peers, .. }
            if what.contains("rank 0 knows") && peers == &[0]),
        "{err}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(20),
        "{took:?}"
    );
    // MPI is not touched again: the next request fails at once.
    let err = store.try_get(b"rank 0 knows").unwrap_err();
    assert!(matches!(err, Error::Broken(_)), "{err}");
    println!("rank {} of {} finished: {}", w.rank(), w.size(), err);
}

#[test]
fn a_rank_that_exits_early_leaves_its_key_missing() {
    let name = "a_rank_that_exits_early_leaves_its_key_missing";
    if !launched() {
        run_job(name, 3, &[("RADIX_MPI_TIMEOUT", "3")], &[0, 1]);
        return;
    }
    let w = world().unwrap();
    let store = kv_store().unwrap();
    let rank = w.rank();
    if rank == 2 {
        // SAFETY: ends this process at once, before it puts its key.
        unsafe { libc::_exit(0) };
    }
    store
        .put(format!("rank/{rank}").as_bytes(), b"here")
        .unwrap();
    let other = format!("rank/{}", 1 - rank);
    assert_eq!(
        store
            .get(other.as_bytes(), Duration::from_secs(30))
            .unwrap(),
        b"here"
    );
    let start = Instant::now();
    let err = store.get(b"rank/2", Duration::from_secs(2)).unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(&err, Error::KeyNotPut { key, seconds, .. } if key == "rank/2" && *seconds == 2.0),
        "{err}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // Rank 0 answers until rank 1 is done with the store.
    if rank == 1 {
        store.put(b"done/1", b"").unwrap();
    } else {
        store.get(b"done/1", Duration::from_secs(30)).unwrap();
    }
    // A collective with the dead rank fails within the deadline, so MPI is
    // not finalized (it would wait for rank 2) and the ranks end cleanly.
    let err = w.all_reduce(1, ReduceOp::Sum, &[1], &mut [0]).unwrap_err();
    assert!(
        matches!(&err, Error::Timeout { peers, .. } if peers.contains(&2)),
        "{err}"
    );
    println!("rank {rank} of 3 finished: {err}");
}

#[test]
fn a_process_started_alone_holds_the_map_itself() {
    if launched() {
        return;
    }
    let store = kv_store().unwrap();
    assert_eq!(store.try_get(b"alone").unwrap(), None);
    store.put(b"alone", b"").unwrap();
    assert_eq!(store.try_get(b"alone").unwrap(), Some(vec![]));
    let waiter = std::thread::spawn(|| {
        kv_store()
            .unwrap()
            .get(b"later", Duration::from_secs(30))
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(50));
    store.put(b"later", &[0, 255, 7]).unwrap();
    assert_eq!(waiter.join().unwrap(), vec![0, 255, 7]);
    let start = Instant::now();
    let err = store.get(b"never", Duration::from_millis(200)).unwrap_err();
    assert!(
        matches!(&err, Error::KeyNotPut { key, rank: 0, .. } if key == "never"),
        "{err}"
    );
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert!(err.to_string().contains("\"never\""), "{err}");
}
