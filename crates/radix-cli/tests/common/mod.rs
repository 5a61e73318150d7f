//! What the CLI tests share: running the binary (the test build's, or the
//! release build the bad-input suite runs) and other processes, each within
//! a deadline, the reference folder, and the check that bad input fails
//! with one clear error line.

#![allow(dead_code, reason = "each test binary uses a part of this module")]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;

/// The most one `radix` command of the tests may take before it counts as
/// hung and is killed: the slowest, a first `radix generate` compiling
/// SmolLM2 into an empty cache, takes about a minute on a loaded 2-core
/// machine.
pub const DEADLINE: Duration = Duration::from_secs(300);

/// The `radix` binary, with backtraces on so that a panic would show, killed
/// after [`DEADLINE`] (the assertion then fails on its signal).
pub fn radix() -> Command {
    let mut cmd = Command::cargo_bin("radix").expect("the radix binary");
    cmd.env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "1")
        .timeout(DEADLINE);
    cmd
}

/// Runs `cmd` (standard input empty) to the end, its output captured,
/// failing the test when it takes more than `deadline`: the process is
/// killed and its output so far shown.
pub fn output_within(cmd: &mut std::process::Command, deadline: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    wait_within(child, deadline, &format!("{cmd:?}"))
}

/// Reads `r` to its end on a thread of its own (nothing if it is `None`).
fn read_all<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(mut r) = r {
            // A read error ends the output; the status tells what happened.
            let _ = r.read_to_end(&mut v);
        }
        v
    })
}

/// Waits for `child` (`what`), reading its piped standard output and error
/// (if piped), and fails the test, killing it, when it runs past `deadline`.
pub fn wait_within(mut child: Child, deadline: Duration, what: &str) -> Output {
    let out = read_all(child.stdout.take());
    let err = read_all(child.stderr.take());
    let start = Instant::now();
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            break (status, false);
        }
        if start.elapsed() > deadline {
            child.kill().expect("kill a child");
            break (child.wait().expect("wait for a child"), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    };
    assert!(
        !timed_out,
        "{what} still ran after {deadline:?} and was killed; its stderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The reference outputs made with PyTorch/transformers, committed in
/// `radix-models`' fixtures (`tests/fixtures/reference`, with the scripts that
/// made them).
pub fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../radix-models/tests/fixtures/reference")
}

/// `radix ARGS` (the debug build, as [`radix`]), which must succeed: its
/// standard output as JSON (`generate --json`, `embed --json`).
#[allow(dead_code)] // not every test binary uses every helper
pub fn radix_json(args: &[&str]) -> serde_json::Value {
    let out = radix()
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).expect("radix's output is JSON")
}

/// The `radix` binary as a plain process command, set up as [`radix`].
pub fn radix_process() -> std::process::Command {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("radix"));
    cmd.env_remove("RUST_LOG").env("RUST_BACKTRACE", "1");
    cmd
}

/// The release build of `radix`, built (or found up to date) by cargo once
/// per test process: `cargo build --release -p radix-cli --bin radix`, whose
/// own output names the executable, wherever the target folder is. The
/// outer `cargo test` holds no lock while its tests run, so the nested
/// build does not wait on it.
pub fn release_binary() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = std::process::Command::new(cargo)
            .args(["build", "--release", "-p", "radix-cli", "--bin", "radix"])
            .args(["--message-format=json-render-diagnostics"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run cargo build --release");
        assert!(
            out.status.success(),
            "cargo build --release -p radix-cli failed"
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "radix")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo names the radix executable")
    })
}

/// The release `radix` ([`release_binary`]) as a plain process command, set
/// up as [`radix`].
pub fn radix_release() -> std::process::Command {
    let mut cmd = std::process::Command::new(release_binary());
    cmd.env_remove("RUST_LOG").env("RUST_BACKTRACE", "1");
    cmd
}

/// The most memory a run on bad input may take: a file's own size is the
/// most radix should read of it, and the bad inputs here are small.
const BAD_INPUT_MAX_RSS: u64 = 1 << 30;

/// How long one run on bad input may take before it counts as hung: each
/// ends in well under a second.
const BAD_INPUT_DEADLINE: Duration = Duration::from_secs(60);

/// Runs `cmd` (with `stdin` on its standard input) to the end: its output
/// and its peak resident memory in bytes (`wait4`'s `ru_maxrss`). A run past
/// [`BAD_INPUT_DEADLINE`] is killed and fails the test.
#[expect(
    clippy::zombie_processes,
    reason = "the child is waited for by wait4, which also gives its peak memory"
)]
pub fn run_measured(cmd: &mut std::process::Command, stdin: &str) -> (std::process::Output, u64) {
    use std::io::Write;
    use std::os::unix::process::ExitStatusExt;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn radix");
    let mut input = child.stdin.take().expect("piped");
    let stdin = stdin.to_string();
    let writer = std::thread::spawn(move || {
        // The process may exit without reading: a closed pipe is fine.
        let _ = input.write_all(stdin.as_bytes());
    });
    let read_all = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            r.read_to_end(&mut v).expect("read a pipe");
            v
        })
    };
    let out = read_all(Box::new(child.stdout.take().expect("piped")));
    let err = read_all(Box::new(child.stderr.take().expect("piped")));
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let start = Instant::now();
    let mut timed_out = false;
    loop {
        // SAFETY: `child` is our unwaited child; the pointers are valid.
        let pid = unsafe {
            libc::wait4(
                child.id() as libc::pid_t,
                &mut status,
                libc::WNOHANG,
                &mut usage,
            )
        };
        if pid == child.id() as libc::pid_t {
            break;
        }
        assert_eq!(pid, 0, "wait4");
        if !timed_out && start.elapsed() > BAD_INPUT_DEADLINE {
            // Not reaped yet, so the pid is still this child's.
            child.kill().expect("kill a hung child");
            timed_out = true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    writer.join().expect("stdin writer");
    let output = std::process::Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    };
    assert!(
        !timed_out,
        "{cmd:?} still ran after {BAD_INPUT_DEADLINE:?} and was killed; its stderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (output, usage.ru_maxrss as u64 * 1024)
}

/// Runs `cmd` and checks that it fails with exactly one error line, the last
/// on stderr, containing `want`: exit code 1 or 2 (no signal, no abort), no
/// panic or backtrace, and under 1 GiB of memory at its peak.
pub fn fails_with_one_error(cmd: &mut std::process::Command, want: &str) {
    fails_with_one_error_on(cmd, "", want);
}

/// [`fails_with_one_error`] with `stdin` on the process's standard input.
pub fn fails_with_one_error_on(cmd: &mut std::process::Command, stdin: &str, want: &str) {
    let (out, peak) = run_measured(cmd, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{:?} for {want:?}: {stderr}",
        out.status
    );
    assert!(
        peak < BAD_INPUT_MAX_RSS,
        "{peak} bytes at the peak for {want:?}: {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert_eq!(stderr.lines().last(), Some(errors[0]), "{stderr}");
    assert!(errors[0].contains(want), "{want:?} not in {stderr}");
}
pub mod server;
