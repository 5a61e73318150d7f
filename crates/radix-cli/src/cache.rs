//! `radix cache {list,clear}`: the on-disk executable cache.

use std::time::SystemTime;

use anyhow::{Context, Result};
use clap::Subcommand;
use radix::{CacheEntry, ExecutableCache};
use serde_json::json;

/// What `radix cache` does.
#[derive(Subcommand)]
pub enum CacheCommand {
    /// List cached executables (key, size, age) in `$RADIX_CACHE_DIR/executables`.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove every cached executable.
    Clear {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: &CacheCommand) -> Result<()> {
    let dir =
        ExecutableCache::default_dir().context("no cache folder: set RADIX_CACHE_DIR or HOME")?;
    let cache = ExecutableCache::new(&dir);
    let dir = cache.dir().display().to_string();
    match cmd {
        CacheCommand::List { json } => {
            let entries = cache.list().with_context(|| format!("listing {dir}"))?;
            let total: u64 = entries.iter().map(|e| e.size).sum();
            if *json {
                let items: Vec<_> = entries.iter().map(entry_json).collect();
                let out = json!({ "dir": dir, "entries": items, "total_bytes": total });
                outln!("{out}")?;
            } else {
                outln!("{dir}")?;
                for e in &entries {
                    let age = age_secs(e).map_or("?".into(), human_age);
                    outln!("  {}  {:>10}  {age:>8} ago", e.key, human_size(e.size))?;
                }
                outln!("{} executables, {}", entries.len(), human_size(total))?;
            }
        }
        CacheCommand::Clear { json } => {
            let removed = cache.clear().with_context(|| format!("clearing {dir}"))?;
            let total: u64 = removed.iter().map(|e| e.size).sum();
            if *json {
                let out = json!({ "dir": dir, "removed": removed.len(), "bytes": total });
                outln!("{out}")?;
            } else {
                outln!(
                    "removed {} executables ({}) from {dir}",
                    removed.len(),
                    human_size(total)
                )?;
            }
        }
    }
    Ok(())
}

fn entry_json(e: &CacheEntry) -> serde_json::Value {
    let modified = e
        .modified
        .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    json!({
        "key": e.key.to_string(),
        "path": e.path,
        "bytes": e.size,
        "modified_unix": modified,
    })
}

fn age_secs(e: &CacheEntry) -> Option<u64> {
    Some(
        SystemTime::now()
            .duration_since(e.modified?)
            .ok()?
            .as_secs(),
    )
}

fn human_age(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn human_size(b: u64) -> String {
    match b {
        0..1024 => format!("{b} B"),
        1024..1048576 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{:.1} MiB", b as f64 / 1048576.0),
    }
}
