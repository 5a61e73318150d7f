//! `radix launch -n N [--hosts ...] -- COMMAND ARGS...`: runs `N` copies of
//! a command as the ranks of one MPI job, through the pinned wheel's hydra
//! `mpiexec`.
//!
//! Hydra starts `radix launch --as-rank -- COMMAND` on each rank; that
//! wrapper runs the command, writes each of its output lines with the
//! rank in front (`[1] ...`), and when the command fails says so on a line
//! of its own. The launcher forwards the job's output, and at the first
//! such line ends the whole job (hydra signals every rank, on every host)
//! and exits with that rank's status. A radix program among the ranks
//! joins the job through `radix_mpi::world()`, as under a user's own
//! `mpiexec` or `srun`.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;

/// How long the ranks get to end after the job is told to stop, before
/// they are killed.
const GRACE: Duration = Duration::from_secs(10);

/// What the wrapper writes when its rank's command fails (the launcher
/// reads it; the command's own lines all start with `[rank]`).
const FAILED: &str = "radix launch: rank ";

#[derive(Args)]
pub struct LaunchArgs {
    /// Number of processes (ranks).
    #[arg(short = 'n', value_name = "N", required_unless_present = "as_rank")]
    n: Option<usize>,
    /// Hosts to spread the ranks over, comma-separated (hydra's `-hosts`;
    /// reached with ssh, and the radix binary must be at the same path on
    /// each). The default is this machine.
    #[arg(long, value_name = "HOST,...")]
    hosts: Option<String>,
    /// Run as one rank's wrapper (what hydra starts; not for users).
    #[arg(long, hide = true)]
    as_rank: bool,
    /// The command each rank runs, and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

pub fn run(args: &LaunchArgs) -> Result<()> {
    if args.as_rank {
        return rank(&args.command);
    }
    let n = args.n.context("-n is required")?;
    anyhow::ensure!(n >= 1, "-n must be at least 1");
    if let Some(hosts) = &args.hosts {
        anyhow::ensure!(
            !hosts.trim().is_empty() && hosts.split(',').all(|h| !h.trim().is_empty()),
            "--hosts {hosts:?}: give host names separated by commas"
        );
    }
    let exe = std::env::current_exe().context("cannot find the radix binary")?;
    let mut cmd =
        radix_mpi::mpiexec_command(n, args.hosts.as_deref()).context("cannot start an MPI job")?;
    cmd.arg(exe)
        .args(["launch", "--as-rank", "--"])
        .args(&args.command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut job = cmd.spawn().context("cannot run mpiexec")?;
    let (tx, rx) = mpsc::channel();
    let out = forward(job.stdout.take().expect("piped"), false, tx.clone());
    let err = forward(job.stderr.take().expect("piped"), true, tx);
    // The first failing rank's line, or the job's end.
    let failed = rx.recv().ok();
    let status = match failed {
        Some(_) => stop(&mut job)?,
        None => job.wait().context("waiting for mpiexec")?,
    };
    let _ = (out.join(), err.join());
    match failed {
        Some((rank, code)) => {
            eprintln!(
                "radix launch: the job stopped because rank {rank} failed (exit status {code})"
            );
            std::process::exit(code)
        }
        None if status.success() => Ok(()),
        None => bail!("mpiexec failed ({status})"),
    }
}

/// Copies `from` to this process's stdout (or stderr) line by line; sends
/// `(rank, status)` when a wrapper's failure line passes.
fn forward(
    from: impl Read + Send + 'static,
    to_stderr: bool,
    failed: mpsc::Sender<(usize, i32)>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(from).split(b'\n') {
            let Ok(line) = line else { break };
            let _ = if to_stderr {
                let mut e = std::io::stderr().lock();
                e.write_all(&line).and_then(|()| e.write_all(b"\n"))
            } else {
                let mut o = std::io::stdout().lock();
                o.write_all(&line).and_then(|()| o.write_all(b"\n"))
            };
            if to_stderr && let Some(f) = failure(&String::from_utf8_lossy(&line)) {
                let _ = failed.send(f);
            }
        }
    })
}

/// `(rank, status)` of a wrapper's failure line.
fn failure(line: &str) -> Option<(usize, i32)> {
    let rest = line.strip_prefix(FAILED)?;
    let (rank, rest) = rest.split_once(' ')?;
    let code = rest.strip_prefix("failed with exit status ")?;
    Some((rank.parse().ok()?, code.trim().parse().ok()?))
}

/// Ends the job: hydra is told to stop (it signals every rank), and the
/// job is killed if it has not ended after [`GRACE`].
fn stop(job: &mut Child) -> Result<ExitStatus> {
    // SAFETY: signals the mpiexec this command started.
    unsafe { libc::kill(job.id() as libc::pid_t, libc::SIGTERM) };
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = job.try_wait()? {
            return Ok(status);
        }
        if start.elapsed() > GRACE {
            let _ = job.kill();
            return Ok(job.wait()?);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One rank: runs the command, its lines prefixed with the rank; a failure
/// is reported on a line of its own and becomes this process's status.
fn rank(command: &[OsString]) -> Result<()> {
    let rank: usize = ["PMI_RANK", "PMIX_RANK"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .and_then(|r| r.parse().ok())
        .context("--as-rank runs under mpiexec only (no PMI_RANK)")?;
    let (program, args) = command.split_first().context("no command")?;
    // Hydra counts this wrapper, not the MPI process it runs, as the rank,
    // so a rank that finished looks to it as one that left MPI unfinished,
    // and it signals the others (SIGUSR1) as it signals survivors of a
    // failure. The wrapper ignores that; the command gets the default back.
    // SAFETY: changes this process's disposition of one signal.
    unsafe { libc::signal(libc::SIGUSR1, libc::SIG_IGN) };
    let mut cmd = Command::new(program);
    // SAFETY: `signal` is async-signal-safe, as code between fork and exec
    // must be.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGUSR1, libc::SIG_DFL);
            Ok(())
        })
    };
    let child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            // As a shell does: 127, and the launcher ends the job.
            eprintln!(
                "[{rank}] radix launch: cannot run {}: {e}",
                program.to_string_lossy()
            );
            eprintln!("{FAILED}{rank} failed with exit status 127");
            std::process::exit(127)
        }
    };
    let prefix = |from: Box<dyn Read + Send>, to_stderr: bool| {
        std::thread::spawn(move || {
            for line in BufReader::new(from).split(b'\n') {
                let Ok(line) = line else { break };
                let mut text = format!("[{rank}] ").into_bytes();
                text.extend_from_slice(&line);
                text.push(b'\n');
                let _ = if to_stderr {
                    std::io::stderr().lock().write_all(&text)
                } else {
                    std::io::stdout().lock().write_all(&text)
                };
            }
        })
    };
    let out = prefix(Box::new(child.stdout.take().expect("piped")), false);
    let err = prefix(Box::new(child.stderr.take().expect("piped")), true);
    let status = child.wait()?;
    let _ = (out.join(), err.join());
    if status.success() {
        return Ok(());
    }
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let code = if code == 0 { 1 } else { code };
    let _ = std::io::stdout().flush();
    eprintln!("{FAILED}{rank} failed with exit status {code}");
    std::process::exit(code)
}
