//! `radix launch`: ranks' lines carry their rank, the first failing rank
//! ends the job with its status, and a radix process among the ranks reads
//! its rank and size from MPI. Every command runs under a deadline.

mod common;

use std::time::{Duration, Instant};

use common::radix;

/// What one of these jobs may take.
const DEADLINE: Duration = Duration::from_secs(120);

fn launch(args: &[&str]) -> std::process::Output {
    radix()
        .arg("launch")
        .args(args)
        .timeout(DEADLINE)
        .output()
        .unwrap()
}

#[test]
fn each_line_carries_its_rank() {
    let out = launch(&[
        "-n",
        "3",
        "--",
        "sh",
        "-c",
        "echo out $PMI_RANK; echo err $PMI_RANK >&2",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for r in 0..3 {
        assert!(
            stdout.lines().any(|l| l == format!("[{r}] out {r}")),
            "{stdout}"
        );
        assert!(
            stderr.lines().any(|l| l == format!("[{r}] err {r}")),
            "{stderr}"
        );
    }
}

#[test]
fn hosts_name_where_the_ranks_run() {
    let out = launch(&[
        "-n",
        "2",
        "--hosts",
        "localhost",
        "--",
        "sh",
        "-c",
        "echo on $PMI_RANK",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("[0] on 0") && stdout.contains("[1] on 1"),
        "{stdout}"
    );
    let out = launch(&["-n", "2", "--hosts", "a,,b", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give host names separated by commas"));
}

#[test]
fn the_first_failing_rank_ends_the_job_with_its_status() {
    let start = Instant::now();
    let out = launch(&[
        "-n",
        "3",
        "--",
        "sh",
        "-c",
        "if [ $PMI_RANK = 1 ]; then exit 7; fi; sleep 100; echo still here",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("rank 1 failed (exit status 7)"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("still here"));
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_radix_rank_reads_its_rank_from_mpi() {
    let radix_bin = assert_cmd::cargo::cargo_bin("radix");
    let out = launch(&[
        "-n",
        "2",
        "--",
        radix_bin.to_str().unwrap(),
        "devices",
        "--platform",
        "cpu",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("[{r}] process:   rank {r} of 2")),
            "{stdout}"
        );
    }
}

#[test]
fn a_command_that_does_not_exist_fails_the_job() {
    let out = launch(&["-n", "2", "--", "/nonexistent/program"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert!(
        stderr.contains("cannot run /nonexistent/program"),
        "{stderr}"
    );
}

#[test]
fn the_rank_wrapper_runs_under_mpiexec_only() {
    let out = radix()
        .args(["launch", "--as-rank", "--", "true"])
        .env_remove("PMI_RANK")
        .env_remove("PMIX_RANK")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("runs under mpiexec only"));
}

#[test]
fn bad_counts_are_refused() {
    let out = launch(&["-n", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-n must be at least 1"));
}
