//! `radix plugin {list,install,path}`.

use anyhow::Result;
use clap::Subcommand;
use radix_pjrt::provision::{self, PLUGINS, Source, Target};
use serde_json::json;

/// What `radix plugin` does.
#[derive(Subcommand)]
pub enum PluginCommand {
    /// List every target's pinned plugin and where it is found on this machine.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Fetch a target's pinned plugin into the radix cache.
    Install {
        /// cpu, cuda, rocm or tpu.
        #[arg(default_value = "cpu")]
        target: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the path of a target's plugin, fetching it if needed.
    Path {
        /// cpu, cuda, rocm or tpu.
        #[arg(default_value = "cpu")]
        target: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: &PluginCommand) -> Result<()> {
    match cmd {
        PluginCommand::List { json } => list(*json),
        PluginCommand::Install { target, json } => {
            let target = parse_target(target)?;
            print_path(target, &provision::install(target)?, *json)
        }
        PluginCommand::Path { target, json } => {
            let target = parse_target(target)?;
            print_path(target, &provision::locate(target, None)?, *json)
        }
    }
}

fn parse_target(name: &str) -> Result<Target> {
    Target::from_name(name)
        .ok_or_else(|| anyhow::anyhow!("unknown target {name:?}: use cpu, cuda, rocm or tpu"))
}

fn print_path(target: Target, path: &std::path::Path, json: bool) -> Result<()> {
    if json {
        outln!("{}", json!({ "target": target.name(), "path": path }))?;
    } else {
        outln!("{}", path.display())?;
    }
    Ok(())
}

fn list(json: bool) -> Result<()> {
    let mut rows = Vec::new();
    for spec in &PLUGINS {
        let found = provision::find(spec.target, None)?;
        let source = found.as_ref().map(|(_, s)| match s {
            Source::Explicit => "explicit",
            Source::Env => "RADIX_PJRT_PLUGIN",
            Source::Cache => "cache",
            Source::Python => "python",
        });
        rows.push(json!({
            "target": spec.target.name(),
            "package": spec.package.requirement(),
            "file": spec.file,
            "path": found.as_ref().map(|(p, _)| p),
            "source": source,
        }));
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    outln!("cache: {}", provision::cache_dir()?.display())?;
    for row in &rows {
        let whereabouts = match (&row["path"], &row["source"]) {
            (serde_json::Value::String(p), serde_json::Value::String(s)) => format!("{p} ({s})"),
            _ => "not on this machine (fetched on first use)".to_string(),
        };
        outln!(
            "{:5} {:30} {}",
            row["target"].as_str().unwrap_or_default(),
            row["package"].as_str().unwrap_or_default(),
            whereabouts
        )?;
    }
    Ok(())
}
