//! `radix run`: runs a StableHLO module (e.g. one exported by JAX) on NumPy
//! inputs and writes or prints its outputs.
//!
//! The `@main` signature is read from the module text (`signature.rs`):
//! argument and result types, and their shardings. Inputs are
//! checked against it, split into one block per partition along their sharded
//! axes, and the outputs' blocks are put back together. A module whose
//! signature cannot be read (generic MLIR form) still runs unsharded, checked
//! by the runtime against the compiled parameters.

use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};
use clap::Args;
use radix::sharding::{place_block, slice_block};
use radix_pjrt::{Buffer, Client, CompileOptions, ElementType, ExecuteOptions};
use serde_json::{Value, json};

use crate::Cli;
use crate::npy::{self, Array};
use crate::signature::{MAX_PARTITIONS, Signature, Tiling, module_partitions, tensor_str};

/// The options of `radix run`.
#[derive(Args)]
pub struct RunArgs {
    /// The StableHLO module, as MLIR text (e.g. `jax.jit(f).lower(x).as_text()`).
    module: PathBuf,
    /// The arguments as one `.npz` (`arr_0`, `arr_1`, … as `numpy.savez` names them).
    #[arg(long, value_name = "FILE.npz", conflicts_with = "npy")]
    inputs: Option<PathBuf>,
    /// The arguments as `.npy` files, in `@main`'s order.
    #[arg(value_name = "INPUT.npy")]
    npy: Vec<PathBuf>,
    /// Write the outputs to this `.npz` as `out0`, `out1`, …
    #[arg(long, short, value_name = "OUT.npz")]
    output: Option<PathBuf>,
    /// Partitions for a sharded module (default: its `mhlo.num_partitions`, else 1).
    /// On the CPU the client gets this many devices unless `--devices` says otherwise.
    #[arg(long, value_name = "N")]
    partitions: Option<usize>,
    /// Print the outputs as one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

/// Runs `radix run`.
pub fn run(cli: &Cli, args: &RunArgs) -> Result<()> {
    let path = &args.module;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read module {}", path.display()))?;
    let signature = Signature::parse(&text)?;
    let inputs = read_inputs(args, signature.as_ref())?;
    let n_parts = match args.partitions {
        Some(0) => bail!("--partitions must be at least 1"),
        Some(n) => n,
        None => match module_partitions(&text) {
            Some(0) => bail!("{}: mhlo.num_partitions is 0", path.display()),
            Some(n) => n,
            None => 1,
        },
    };
    // A CPU client makes one device per partition: a count no machine has
    // would exhaust memory in the plugin before any check of its own.
    ensure!(
        n_parts <= MAX_PARTITIONS,
        "{n_parts} partitions: radix runs at most {MAX_PARTITIONS}"
    );
    if let Some(sig) = &signature {
        sig.check_inputs(&inputs)?;
    } else if n_parts > 1 {
        bail!(
            "cannot read the @main signature of {}, which a sharded run needs",
            path.display()
        );
    }
    let shardy = text.contains("sdy.sharding") || text.contains("sdy.mesh");
    let split = match &signature {
        Some(sig) => sig
            .args
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.tiling(&text, n_parts)
                    .with_context(|| format!("argument {i}"))
            })
            .collect::<Result<Vec<_>>>()?,
        None => vec![Tiling::replicated(0, 1); inputs.len()],
    };

    let client = open_client(cli, n_parts)?;
    let devices = client.addressable_devices();
    let options = CompileOptions {
        num_partitions: n_parts,
        spmd: n_parts > 1,
        use_shardy: shardy,
        device_assignment: Some(
            devices[..n_parts]
                .iter()
                .map(|d| i64::from(d.id()))
                .collect(),
        ),
        ..CompileOptions::default()
    };
    // The plugin's MLIR diagnostics span lines; the error is one line.
    let exe = client.compile(&text, &options).map_err(|e| {
        let msg = e.to_string();
        let lines: Vec<&str> = msg
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        anyhow::anyhow!("cannot compile {}: {}", path.display(), lines.join(" | "))
    })?;
    if signature.is_none()
        && let Some(n) = exe.num_parameters()
    {
        ensure!(
            n == inputs.len(),
            "the module takes {n} arguments, {} inputs given",
            inputs.len()
        );
    }

    // One argument list per partition, each input cut to that partition's block.
    let mut buffers: Vec<Vec<Buffer>> = Vec::with_capacity(n_parts);
    for (p, device) in exe.devices().iter().enumerate() {
        let mut list = Vec::with_capacity(inputs.len());
        for (i, ((name, a), tiling)) in inputs.iter().zip(&split).enumerate() {
            let (start, block) = tiling.block(p, a.dims());
            let bytes = slice_block(a.data(), a.dims(), a.ty().byte_size(), &start, &block);
            let buf = client
                .buffer_from_host(&bytes, a.ty(), &block, device)
                .with_context(|| format!("argument {i} ({name})"))?;
            list.push(buf);
        }
        buffers.push(list);
    }
    let arg_refs: Vec<Vec<&Buffer>> = buffers.iter().map(|l| l.iter().collect()).collect();
    let outputs = exe.execute(&arg_refs, &ExecuteOptions::default())?;
    let results = gather(&outputs, signature.as_ref(), &text, n_parts)?;

    let named: Vec<(String, Array)> = results
        .into_iter()
        .enumerate()
        .map(|(i, a)| (format!("out{i}"), a))
        .collect();
    if let Some(out) = &args.output {
        npy::write_npz(out, &named)?;
    }
    if args.json {
        let outs: Vec<Value> = named
            .iter()
            .map(|(name, a)| {
                json!({
                    "name": name,
                    "dtype": a.ty().mlir_name(),
                    "shape": a.dims(),
                    "data": nest(&values(a), a.dims()),
                })
            })
            .collect();
        outln!("{}", json!({ "outputs": outs }))?;
    } else if args.output.is_none() {
        for (name, a) in &named {
            let vals = values(a);
            let first: Vec<String> = vals.iter().take(8).map(Value::to_string).collect();
            let more = if vals.len() > 8 { ", …" } else { "" };
            outln!(
                "{name}: {} [{}{more}]",
                tensor_str(a.ty(), a.dims()),
                first.join(", ")
            )?;
        }
    }
    Ok(())
}

/// Opens the client; on the CPU, with `n_parts` devices unless `--devices` is given.
fn open_client(cli: &Cli, n_parts: usize) -> Result<Client> {
    let client = crate::devices::open_client(cli)?;
    let mut n = client.addressable_devices().len();
    if n < n_parts && cli.devices.is_none() && client.platform_name() == "cpu" {
        drop(client);
        let client = radix_pjrt::open(&radix_pjrt::OpenOptions {
            plugin: cli.plugin.as_deref(),
            cpu_devices: Some(n_parts as i64),
            ..radix_pjrt::OpenOptions::target(radix_pjrt::provision::Target::Cpu)
        })?;
        n = client.addressable_devices().len();
        if n >= n_parts {
            return Ok(client);
        }
    } else if n >= n_parts {
        return Ok(client);
    }
    bail!("{n_parts} partitions need {n_parts} devices, the platform has {n} (see --devices)")
}

/// The inputs, named for error messages (`arr_1 of x.npz`, `y.npy`). An
/// array of a `.npz` larger than every argument of a known signature is
/// refused before it is read whole.
fn read_inputs(args: &RunArgs, signature: Option<&Signature>) -> Result<Vec<(String, Array)>> {
    if let Some(path) = &args.inputs {
        let arrays = match signature {
            Some(sig) => {
                let largest = sig.args.iter().try_fold(0u64, |m, p| {
                    Ok::<_, anyhow::Error>(m.max(radix_pjrt::byte_len(p.ty, &p.dims)? as u64))
                })?;
                // The header of an `.npy` is at most a few kilobytes.
                npy::read_npz_at_most(path, largest.saturating_add(64 << 10))?
            }
            None => npy::read_npz(path)?,
        };
        let file = path.display();
        return Ok(arrays
            .into_iter()
            .map(|(name, a)| (format!("{name} of {file}"), a))
            .collect());
    }
    args.npy
        .iter()
        .map(|p| Ok((p.display().to_string(), npy::read_npy(p)?)))
        .collect()
}

/// Gathers each output's per-partition blocks into one array.
fn gather(
    outputs: &[Vec<Buffer>],
    signature: Option<&Signature>,
    module: &str,
    n_parts: usize,
) -> Result<Vec<Array>> {
    let n_out = outputs.first().map_or(0, Vec::len);
    let mut res = Vec::with_capacity(n_out);
    for j in 0..n_out {
        let first = &outputs[0][j];
        let ty = first.element_type()?;
        let shard_dims = first.dims()?.to_vec();
        let param = signature.and_then(|s| s.results.get(j));
        let Some(param) = param.filter(|p| n_parts > 1 && p.dims != shard_dims) else {
            res.push(Array::new(ty, shard_dims, first.to_host_vec()?)?);
            continue;
        };
        ensure!(
            param.sharding.is_some(),
            "output {j} is {} per partition, not {}, and has no sharding to gather it by",
            tensor_str(ty, &shard_dims),
            tensor_str(param.ty, &param.dims)
        );
        let tiling = param
            .tiling(module, n_parts)
            .with_context(|| format!("output {j}"))?;
        let size = ty.byte_size();
        let mut data = vec![0u8; radix_pjrt::byte_len(ty, &param.dims)?];
        for (p, outs) in outputs.iter().enumerate() {
            let (start, block) = tiling.block(p, &param.dims);
            let got = outs[j].dims()?;
            ensure!(
                got == block.as_slice(),
                "output {j} of partition {p} is {}, its sharding gives {}",
                tensor_str(ty, got),
                tensor_str(ty, &block)
            );
            place_block(
                &mut data,
                &param.dims,
                size,
                &start,
                &block,
                &outs[j].to_host_vec()?,
            );
        }
        res.push(Array::new(ty, param.dims.clone(), data)?);
    }
    Ok(res)
}

/// The elements of `a` as JSON values: numbers, booleans, `[re, im]` pairs;
/// floats are written with the shortest decimal that reads back exactly in
/// their own precision, non-finite ones as `null`.
fn values(a: &Array) -> Vec<Value> {
    use ElementType::*;
    fn short(s: String) -> Value {
        s.parse::<f64>().map_or(Value::Null, Value::from)
    }
    let size = a.ty().byte_size();
    a.data()
        .chunks_exact(size)
        .map(|c| match a.ty() {
            Bool => Value::from(c[0] != 0),
            S8 => Value::from(c[0] as i8),
            S16 => Value::from(i16::from_le_bytes([c[0], c[1]])),
            S32 => Value::from(i32::from_le_bytes(c.try_into().unwrap_or_default())),
            S64 => Value::from(i64::from_le_bytes(c.try_into().unwrap_or_default())),
            U8 => Value::from(c[0]),
            U16 => Value::from(u16::from_le_bytes([c[0], c[1]])),
            U32 => Value::from(u32::from_le_bytes(c.try_into().unwrap_or_default())),
            U64 => Value::from(u64::from_le_bytes(c.try_into().unwrap_or_default())),
            F16 => short(half::f16::from_le_bytes([c[0], c[1]]).to_string()),
            BF16 => short(half::bf16::from_le_bytes([c[0], c[1]]).to_string()),
            F32 => short(f32::from_le_bytes(c.try_into().unwrap_or_default()).to_string()),
            F64 => Value::from(f64::from_le_bytes(c.try_into().unwrap_or_default())),
            C64 => {
                let (re, im) = c.split_at(4);
                let f = |b: &[u8]| {
                    short(f32::from_le_bytes(b.try_into().unwrap_or_default()).to_string())
                };
                Value::from(vec![f(re), f(im)])
            }
            C128 => {
                let (re, im) = c.split_at(8);
                let f =
                    |b: &[u8]| Value::from(f64::from_le_bytes(b.try_into().unwrap_or_default()));
                Value::from(vec![f(re), f(im)])
            }
            F8E5M2 | F8E4M3FN => Value::from(c[0]),
        })
        .collect()
}

/// Nests flat C-order values into arrays of shape `dims`.
fn nest(flat: &[Value], dims: &[i64]) -> Value {
    match dims.split_first() {
        None => flat.first().cloned().unwrap_or(Value::Null),
        Some((&n, rest)) => {
            let step = rest.iter().product::<i64>() as usize;
            let n = n as usize;
            Value::Array(
                (0..n)
                    .map(|i| nest(&flat[i * step..(i + 1) * step], rest))
                    .collect(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip() {
        let dims = [4, 6];
        let data: Vec<u8> = (0..24).collect();
        let mut back = vec![0u8; 24];
        for (start, block) in [
            ([0, 0], [2, 3]),
            ([0, 3], [2, 3]),
            ([2, 0], [2, 3]),
            ([2, 3], [2, 3]),
        ] {
            let b = slice_block(&data, &dims, 1, &start, &block);
            place_block(&mut back, &dims, 1, &start, &block, &b);
        }
        assert_eq!(back, data);
        assert_eq!(
            slice_block(&data, &dims, 1, &[2, 3], &[2, 3]),
            [15, 16, 17, 21, 22, 23]
        );
    }
}
