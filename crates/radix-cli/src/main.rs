//! The `radix` command: generate text, score it, embed sentences, serve both over
//! HTTP, run StableHLO modules, and show devices and plugins.

/// `println!` that returns the write's `io::Result` instead of panicking:
/// a reader that closes the pipe (`radix cache list | head -1`) ends the
/// output, and `main` exits quietly.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `print!` as [`outln!`] is `println!`.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod cache;
mod devices;
mod embed;
mod generate;
mod launch;
mod npy;
mod perplexity;
mod plugin;
mod run;
mod serve;
mod signature;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Run machine-learning models on any accelerator through PJRT.
#[derive(Parser)]
#[command(name = "radix", version, about, propagate_version = true)]
struct Cli {
    /// Which plugin to run on: `auto` picks an accelerator when its plugin and a
    /// device are present, the CPU otherwise.
    #[arg(long, global = true, value_enum, default_value_t = PlatformArg::Auto)]
    platform: PlatformArg,
    /// Number of CPU devices (CPU plugin only).
    #[arg(long, global = true, value_name = "N")]
    devices: Option<i64>,
    /// A PJRT plugin file to use instead of the pinned one.
    #[arg(long, global = true, value_name = "PATH")]
    plugin: Option<PathBuf>,
    /// More logging (-v info, -vv debug); `RUST_LOG` overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PlatformArg {
    Auto,
    Cpu,
    Cuda,
    Rocm,
    Tpu,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text with a language model (SmolLM2-135M-Instruct by default).
    Generate(generate::GenerateArgs),
    /// Embed sentences (all-MiniLM-L6-v2 by default) and compare them.
    Embed(embed::EmbedArgs),
    /// Score a text file with a language model: its perplexity, as
    /// llama.cpp's `llama-perplexity` computes it.
    Perplexity(perplexity::PerplexityArgs),
    /// Show the platform, its plugin, PJRT and StableHLO versions, and devices.
    Devices {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Find, fetch and show PJRT plugins.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// List or clear the on-disk cache of compiled executables.
    #[command(subcommand)]
    Cache(cache::CacheCommand),
    /// Run a StableHLO module (e.g. exported by JAX) on NumPy inputs.
    Run(run::RunArgs),
    /// Serve the models over an OpenAI-compatible HTTP API.
    Serve(serve::ServeArgs),
    /// Run N copies of a command as the ranks of one MPI job.
    Launch(launch::LaunchArgs),
}

/// Keeps XLA's informational lines (the CPU plugin logs each create option
/// it reads, before any logging is configured) off stderr, unless the user
/// set `TF_CPP_MIN_LOG_LEVEL` themselves. Warnings and errors still show.
fn quiet_plugin_info() {
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        // SAFETY: the first thing `main` does, before any other thread
        // exists that could read the environment.
        unsafe { std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "1") };
    }
}

fn main() -> ExitCode {
    quiet_plugin_info();
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let res = match &cli.command {
        Command::Generate(args) => generate::run(&cli, args),
        Command::Embed(args) => embed::run(&cli, args),
        Command::Perplexity(args) => perplexity::run(&cli, args),
        Command::Devices { json } => devices::run(&cli, *json),
        Command::Plugin(cmd) => no_platform_flags(&cli, "plugin").and_then(|()| plugin::run(cmd)),
        Command::Cache(cmd) => no_platform_flags(&cli, "cache").and_then(|()| cache::run(cmd)),
        Command::Run(args) => run::run(&cli, args),
        Command::Serve(args) => serve::run(&cli, args),
        Command::Launch(args) => no_platform_flags(&cli, "launch").and_then(|()| launch::run(args)),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        // The reader closed the pipe: the output ends there.
        Err(err) if closed_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the error and its causes, no backtrace (a cause
            // that spans lines, as a parser's diagnostic may, is joined).
            eprintln!("error: {}", one_line(&format!("{err:#}")));
            ExitCode::FAILURE
        }
    }
}

/// `text`'s non-blank lines, trimmed and joined by ` | `.
fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join(" | ")
}

/// Whether `err` comes from writing to a pipe whose reader is gone.
fn closed_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Refuses the platform flags for a subcommand that opens no platform
/// (they would be ignored).
fn no_platform_flags(cli: &Cli, command: &str) -> anyhow::Result<()> {
    for (flag, given) in [
        ("--platform", cli.platform != PlatformArg::Auto),
        ("--devices", cli.devices.is_some()),
        ("--plugin", cli.plugin.is_some()),
    ] {
        anyhow::ensure!(
            !given,
            "{flag} does not apply to `radix {command}`, which opens no platform"
        );
    }
    Ok(())
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
