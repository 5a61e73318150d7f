//! Opening MPI: the pinned wheel's library, and clear errors for a missing
//! file, a library that is not MPI, and a rank whose `RADIX_MPI_LIB` is
//! wrong.

use std::path::Path;
use std::time::Duration;

use radix_mpi::{Error, Mpi, launched, library_path, run_ranks, world};

#[test]
fn the_pinned_wheel_is_mpich_of_the_pinned_version() {
    let mpi = Mpi::open(&radix_mpi::mpich_dir().unwrap().join("lib/libmpi.so.12")).unwrap();
    let version = mpi.version().unwrap();
    assert!(
        version.contains("MPICH Version:") && version.contains("5.0.2"),
        "{version}"
    );
    assert!(radix_mpi::mpiexec().unwrap().is_file());
}

#[test]
fn a_missing_library_and_one_that_is_not_mpi_are_errors() {
    let err = Mpi::open(Path::new("/nonexistent/libmpi.so.12")).unwrap_err();
    assert!(matches!(err, Error::Library { .. }), "{err}");
    assert!(err.to_string().contains("RADIX_MPI_LIB"), "{err}");
    // The C library opens, but has no MPI functions.
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib64/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.is_file())
    .expect("a C library");
    let err = Mpi::open(libc).unwrap_err().to_string();
    assert!(err.contains("no function MPI_"), "{err}");
}

#[test]
fn a_rank_with_a_wrong_library_gets_an_error_not_an_abort() {
    let name = "a_rank_with_a_wrong_library_gets_an_error_not_an_abort";
    if !launched() {
        let exe = std::env::current_exe().unwrap();
        let out = run_ranks(
            1,
            &exe,
            &[name, "--exact", "--nocapture", "--test-threads=1"],
            &[("RADIX_MPI_LIB", "/nonexistent/libmpi.so.12")],
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("rank finished with"), "{}", out.stdout);
        return;
    }
    assert_eq!(
        library_path().unwrap(),
        Path::new("/nonexistent/libmpi.so.12")
    );
    let err = world().map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::Library { .. }), "{err}");
    // The same error every time.
    assert_eq!(
        world().map(|_| ()).unwrap_err().to_string(),
        err.to_string()
    );
    println!("rank finished with {err}");
}

#[test]
fn a_job_past_its_deadline_is_killed() {
    if launched() {
        return;
    }
    let start = std::time::Instant::now();
    let err = run_ranks(2, Path::new("sleep"), &["30"], &[], Duration::from_secs(2)).unwrap_err();
    assert!(matches!(err, Error::Job(_)), "{err}");
    assert!(err.to_string().contains("ran past 2 s"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}
