//! `radix devices`: what the chosen platform is and what it sees.

use anyhow::Result;
use radix_pjrt::Client;
use serde_json::json;

use crate::{Cli, PlatformArg};

pub fn run(cli: &Cli, json: bool) -> Result<()> {
    // A rank of an MPI job (`radix launch`, `mpiexec`, `srun`) says which.
    let process = if radix_mpi::launched() {
        let world = radix_mpi::world()?;
        Some(json!({"rank": world.rank(), "size": world.size()}))
    } else {
        None
    };
    let client = open_client(cli)?;
    let plugin = client.plugin();
    let (major, minor) = plugin.api_version();
    let version =
        |v: Option<&[i64]>| v.map(|v| v.iter().map(i64::to_string).collect::<Vec<_>>().join("."));
    let devices: Vec<_> = client
        .devices()
        .iter()
        .map(|d| {
            json!({
                "id": d.id(),
                "kind": d.kind(),
                "process_index": d.process_index(),
                "addressable": d.is_addressable(),
            })
        })
        .collect();
    let info = json!({
        "platform": client.platform_name(),
        "platform_version": client.platform_version(),
        "plugin": plugin.path(),
        "pjrt_api_version": format!("{major}.{minor}"),
        "stablehlo_current_version": version(plugin.stablehlo_current_version()),
        "stablehlo_minimum_version": version(plugin.stablehlo_minimum_version()),
        "devices": devices,
        "process": process,
    });
    if json {
        outln!("{}", serde_json::to_string_pretty(&info)?)?;
        return Ok(());
    }
    outln!(
        "platform:  {} ({})",
        client.platform_name(),
        client.platform_version()
    )?;
    outln!("plugin:    {}", plugin.path().display())?;
    outln!("PJRT API:  {major}.{minor}")?;
    outln!(
        "StableHLO: {} (minimum {})",
        info["stablehlo_current_version"]
            .as_str()
            .unwrap_or("unknown"),
        info["stablehlo_minimum_version"]
            .as_str()
            .unwrap_or("unknown")
    )?;
    if let Some(p) = &process {
        outln!("process:   rank {} of {}", p["rank"], p["size"])?;
    }
    outln!("devices:")?;
    for d in client.devices() {
        let addressable = if d.is_addressable() {
            ""
        } else {
            " (not addressable)"
        };
        outln!("  {:3} {}{addressable}", d.id(), d.kind())?;
    }
    Ok(())
}

/// A client on the platform chosen on the command line.
pub fn open_client(cli: &Cli) -> Result<Client> {
    let target = match cli.platform {
        PlatformArg::Auto => None,
        PlatformArg::Cpu => Some(radix_pjrt::provision::Target::Cpu),
        PlatformArg::Cuda => Some(radix_pjrt::provision::Target::Cuda),
        PlatformArg::Rocm => Some(radix_pjrt::provision::Target::Rocm),
        PlatformArg::Tpu => Some(radix_pjrt::provision::Target::Tpu),
    };
    Ok(radix_pjrt::open(&radix_pjrt::OpenOptions {
        target,
        plugin: cli.plugin.as_deref(),
        cpu_devices: cli.devices,
        distributed: None,
    })?)
}
