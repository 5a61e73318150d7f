//! Starting the processes of a job: hydra's `mpiexec` from the pinned
//! wheel, and [`run_ranks`], which runs a command as `n` ranks under a
//! deadline (what tests use to start themselves as a job).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// `mpiexec -n <n>` (hydra, from the pinned wheel), with `-hosts` when
/// `hosts` names some, and `RADIX_MPI_LIB` set for the ranks to the MPI
/// library that matches this `mpiexec` (unless the caller set it).
/// `-disable-auto-cleanup` keeps hydra from killing the other ranks when
/// one exits without finalizing MPI: they see the failure as an
/// [`Error::Timeout`] and end with their own error.
pub fn mpiexec_command(n: usize, hosts: Option<&str>) -> Result<Command> {
    let mpiexec = crate::fetch::mpiexec()?;
    let mut cmd = Command::new(&mpiexec);
    cmd.arg("-disable-auto-cleanup");
    if let Some(hosts) = hosts {
        cmd.args(["-hosts", hosts]);
    }
    cmd.args(["-n", &n.to_string()]);
    if std::env::var_os("RADIX_MPI_LIB").is_none_or(|v| v.is_empty()) {
        cmd.env("RADIX_MPI_LIB", crate::fetch::library_path()?);
    }
    Ok(cmd)
}

/// What a job printed and how it ended.
#[derive(Debug)]
pub struct JobOutput {
    /// `mpiexec`'s exit status (hydra's: the ranks' statuses or-ed).
    pub status: ExitStatus,
    /// Every rank's standard output, as hydra forwarded it.
    pub stdout: String,
    /// Every rank's standard error.
    pub stderr: String,
}

impl JobOutput {
    /// `Err` with everything the job printed unless it exited successfully
    /// and each rank of `ranks` (of `n`) said it finished
    /// ([`say_finished`]): a job whose bodies never ran does not pass.
    pub fn check_finished(&self, n: usize, ranks: &[usize]) -> std::result::Result<(), String> {
        let all = format!("{}\n{}", self.stdout, self.stderr);
        if !self.status.success() {
            return Err(format!("{n} ranks: {}\n{all}", self.status));
        }
        match ranks.iter().find(|r| !all.contains(&finished(**r, n))) {
            Some(r) => Err(format!("rank {r} of {n} did not finish:\n{all}")),
            None => Ok(()),
        }
    }
}

/// Says that rank `rank` of a job of `n` did its part of a test, on
/// standard output, as [`JobOutput::check_finished`] looks for it.
pub fn say_finished(rank: usize, n: usize) {
    println!("{}", finished(rank, n));
}

fn finished(rank: usize, n: usize) -> String {
    format!("rank {rank} of {n} finished")
}

/// Runs test `name` of the running test binary as `n` ranks
/// ([`run_ranks`] of libtest's `name --exact --nocapture
/// --test-threads=1`): how a test starts itself as a job, whose ranks
/// ([`crate::launched`]) then do their part.
pub fn run_test_as_ranks(
    name: &str,
    n: usize,
    env: &[(&str, &str)],
    deadline: Duration,
) -> Result<JobOutput> {
    let exe = std::env::current_exe().map_err(|e| Error::Job(format!("this test binary: {e}")))?;
    let args = [name, "--exact", "--nocapture", "--test-threads=1"];
    run_ranks(n, &exe, &args, env, deadline)
}

/// Runs `program args` as `n` ranks on this machine and waits at most
/// `deadline` for the job; one that runs longer is killed with its whole
/// process group, and is an [`Error::Job`].
pub fn run_ranks(
    n: usize,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    deadline: Duration,
) -> Result<JobOutput> {
    let mut cmd = mpiexec_command(n, None)?;
    cmd.arg(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let io = |e: std::io::Error| Error::Job(format!("mpiexec: {e}"));
    let mut child = cmd.spawn().map_err(io)?;
    let pgid = child.id() as libc::pid_t;
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("piped")));
    let err = reader(Box::new(child.stderr.take().expect("piped")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(io)? {
            break status;
        }
        if start.elapsed() > deadline {
            // SAFETY: signals the process group this function started.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            let (stdout, stderr) = (out.join(), err.join());
            return Err(Error::Job(format!(
                "{n} ranks of {} ran past {} s and were killed (stdout: {:?}, stderr: {:?})",
                program.display(),
                deadline.as_secs(),
                stdout.unwrap_or_default(),
                stderr.unwrap_or_default()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(JobOutput {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}
