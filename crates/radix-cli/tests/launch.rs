//! `radix launch`: ranks' lines carry their rank, the first failing rank
//! ends the job with its status, a radix process among the ranks reads
//! its rank and size from MPI, and `radix generate --tensor-parallel` over 2
//! ranks prints, once, the ids one process picks. Every command runs under
//! a deadline.

mod common;

#[path = "../../radix-models/tests/common/greedy.rs"]
mod greedy;

use std::time::{Duration, Instant};

use common::{radix, radix_json};

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

#[test]
fn generate_split_over_2_ranks_prints_the_ids_one_process_picks() {
    let radix_bin = assert_cmd::cargo::cargo_bin("radix");
    let prompt = "The capital of France is";
    let generate = ["generate", "--json", "--dtype", "f32", "--max-tokens", "8"];
    let mut args = vec!["-n", "2", "--", radix_bin.to_str().unwrap()];
    args.extend(generate);
    args.extend(["--tensor-parallel", prompt]);
    let out = launch(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Rank 0 alone prints; hydra prefixes its lines with `[0] `.
    assert!(!stdout.contains("[1]"), "rank 1 printed:\n{stdout}");
    let split = rank_0_json(&stdout);
    assert_eq!(split["tensor_parallel"], 2, "{split}");
    let whole = radix_json(&[&generate[..], &["--logits", prompt]].concat());
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        serde_json::from_value(v["ids"].clone()).expect("ids")
    };
    greedy::assert_greedy_eq(
        "radix generate split over 2 ranks vs one process",
        &ids(&split),
        &ids(&whole),
        |k| {
            greedy::top2_margin(
                &serde_json::from_value::<Vec<f32>>(whole["logits"][k].clone()).expect("logits"),
            )
        },
    );
}

/// Sampling without `--seed`, the ranks of a tensor-parallel job agree on
/// one (each would otherwise take its own clock's, draw other tokens and
/// sum partial results of different sequences): each rank logs the seed it
/// samples with, and the JSON names it.
#[test]
fn generate_split_over_2_ranks_samples_with_one_seed() {
    let radix_bin = assert_cmd::cargo::cargo_bin("radix");
    let out = launch(&[
        "-n",
        "2",
        "--",
        radix_bin.to_str().unwrap(),
        "-v",
        "generate",
        "--json",
        "--max-tokens",
        "4",
        "--temperature",
        "0.9",
        "--tensor-parallel",
        "Once upon a time",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let seed_of = |rank: usize| -> Option<String> {
        stderr
            .lines()
            .filter(|l| l.starts_with(&format!("[{rank}] ")))
            .find_map(|l| {
                l.split_once(" with seed ")
                    .map(|(_, s)| s.trim().to_string())
            })
    };
    let (a, b) = (seed_of(0), seed_of(1));
    assert!(
        a.is_some() && a == b,
        "ranks' seeds {a:?} and {b:?}:\n{stderr}"
    );
    let split = rank_0_json(&stdout);
    assert_eq!(split["seed"].to_string(), a.unwrap(), "{split}");
}

/// The JSON object rank 0 printed, hydra's `[0] ` taken off its lines.
fn rank_0_json(stdout: &str) -> serde_json::Value {
    let json: String = stdout
        .lines()
        .map(|l| l.strip_prefix("[0] ").unwrap_or(l).to_string() + "\n")
        .collect();
    serde_json::from_str(&json).expect("one JSON object")
}

#[test]
fn generate_split_needs_the_prompt_as_an_argument() {
    let out = radix()
        .args(["generate", "--tensor-parallel"])
        .timeout(DEADLINE)
        .write_stdin("hello")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--tensor-parallel needs the prompt"),
        "{stderr}"
    );
}
