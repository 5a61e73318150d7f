//! `radix run`: runs a StableHLO module (e.g. one exported by JAX) on NumPy
//! inputs and writes or prints its outputs.
//!
//! The `@main` signature is read from the module text: argument and result
//! types, and their shardings (GSPMD `mhlo.sharding` strings, Shardy
//! `sdy.sharding` attributes with the module's `sdy.mesh`es). Inputs are
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

/// The most partitions `radix run` accepts.
const MAX_PARTITIONS: usize = 4096;

/// The module's `mhlo.num_partitions` attribute.
fn module_partitions(text: &str) -> Option<usize> {
    let rest = &text[text.find("mhlo.num_partitions = ")? + "mhlo.num_partitions = ".len()..];
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

/// `@main`'s arguments and results.
#[derive(Debug)]
struct Signature {
    args: Vec<Param>,
    results: Vec<Param>,
}

/// One argument or result of `@main`: its type and sharding attribute.
#[derive(Debug)]
struct Param {
    ty: ElementType,
    dims: Vec<i64>,
    /// `mhlo.sharding`'s string, or `sdy.sharding`'s `#sdy.sharding<…>`.
    sharding: Option<ShardingAttr>,
}

#[derive(Debug)]
enum ShardingAttr {
    Gspmd(String),
    Shardy(String),
}

impl Signature {
    /// Reads the signature of `func.func [public] @main` in pretty MLIR text;
    /// `None` when there is none in that form (generic form, bytecode).
    fn parse(text: &str) -> Result<Option<Signature>> {
        let Some(at) = ["func.func public @main(", "func.func @main("]
            .iter()
            .find_map(|pat| text.find(pat).map(|i| i + pat.len() - 1))
        else {
            if text.trim_start().starts_with("module") || text.contains("func.func") {
                return Ok(None);
            }
            bail!("this is not a StableHLO module: no `module` or `func.func @main` in its text");
        };
        let sig = &text[at..];
        let end = close(sig).context("unbalanced brackets in @main's arguments")?;
        let args = split_top(&sig[1..end - 1])
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                let (_, ty) = a.split_once(':').context("an argument without a type")?;
                Param::parse(ty).with_context(|| format!("argument {i} of @main"))
            })
            .collect::<Result<_>>()?;
        let rest = sig[end..].trim_start();
        let results = match rest.strip_prefix("->").map(str::trim_start) {
            None => Vec::new(),
            Some(r) if r.starts_with('(') => {
                let end = close(r).context("unbalanced brackets in @main's results")?;
                split_top(&r[1..end - 1])
                    .into_iter()
                    .enumerate()
                    .map(|(i, t)| Param::parse(t).with_context(|| format!("result {i} of @main")))
                    .collect::<Result<_>>()?
            }
            Some(r) => vec![Param::parse(r.split(" {").next().unwrap_or(r))?],
        };
        Ok(Some(Signature { args, results }))
    }

    /// Checks the inputs' count, element types and shapes.
    fn check_inputs(&self, inputs: &[(String, Array)]) -> Result<()> {
        ensure!(
            inputs.len() == self.args.len(),
            "@main takes {} arguments, {} inputs given",
            self.args.len(),
            inputs.len()
        );
        for (i, (param, (name, a))) in self.args.iter().zip(inputs).enumerate() {
            ensure!(
                param.ty == a.ty() && param.dims == a.dims(),
                "argument {i} of @main is {}, input {name} is {}",
                tensor_str(param.ty, &param.dims),
                tensor_str(a.ty(), a.dims())
            );
        }
        Ok(())
    }
}

impl Param {
    /// Parses `tensor<2x3xf32> {attributes}`.
    fn parse(text: &str) -> Result<Param> {
        let text = text.trim();
        let Some(inner) = text.strip_prefix("tensor").filter(|t| t.starts_with('<')) else {
            bail!("unsupported type {text} (only tensors are)");
        };
        let end = close(inner).with_context(|| format!("cannot read type {text}"))?;
        let mut spec = inner[1..end - 1].split(',').next().unwrap_or("").trim();
        let mut dims = Vec::new();
        while let Some((d, rest)) = spec.split_once('x') {
            if d == "?" {
                bail!("dynamic shape {text} is not supported");
            }
            let Ok(d) = d.parse::<i64>() else { break };
            dims.push(d);
            spec = rest;
        }
        let Some(ty) = ElementType::ALL.into_iter().find(|t| t.mlir_name() == spec) else {
            bail!("unsupported element type {spec}");
        };
        let attrs = inner[end..].trim_start();
        let sharding = if let Some(s) = attr(attrs, "mhlo.sharding") {
            let s = s.trim_start_matches('"');
            Some(ShardingAttr::Gspmd(
                s[..s.find('"').unwrap_or(s.len())].to_string(),
            ))
        } else {
            attr(attrs, "sdy.sharding").map(|s| ShardingAttr::Shardy(s.to_string()))
        };
        Ok(Param { ty, dims, sharding })
    }

    /// How this argument or result is split over `n_parts` partitions.
    fn tiling(&self, module: &str, n_parts: usize) -> Result<Tiling> {
        let rank = self.dims.len();
        let tiling = match &self.sharding {
            _ if n_parts == 1 => return Ok(Tiling::replicated(rank, 1)),
            None => Tiling::replicated(rank, n_parts),
            Some(ShardingAttr::Gspmd(s)) => {
                gspmd_tiling(s, rank, n_parts).with_context(|| format!("sharding \"{s}\""))?
            }
            Some(ShardingAttr::Shardy(s)) => {
                shardy_tiling(s, module, rank, n_parts).with_context(|| format!("sharding {s}"))?
            }
        };
        for (d, (&size, &count)) in self.dims.iter().zip(&tiling.counts).enumerate() {
            ensure!(
                size % count == 0,
                "axis {d} of {} is split {count} ways, which does not divide {size}",
                tensor_str(self.ty, &self.dims)
            );
        }
        Ok(tiling)
    }
}

/// The value of attribute `key` in an attribute dictionary `{k = v, …}`.
fn attr<'a>(attrs: &'a str, key: &str) -> Option<&'a str> {
    let dict = attrs.strip_prefix('{')?;
    let dict = &dict[..close(attrs)? - 2];
    split_top(dict).into_iter().find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// How an array is split into blocks over partitions.
#[derive(Debug, Clone, PartialEq)]
struct Tiling {
    /// The number of blocks along each axis.
    counts: Vec<i64>,
    /// For each partition, its block's index along each axis.
    coords: Vec<Vec<i64>>,
}

impl Tiling {
    /// The whole array on each of `n_parts` partitions.
    fn replicated(rank: usize, n_parts: usize) -> Tiling {
        Tiling {
            counts: vec![1; rank],
            coords: vec![vec![0; rank]; n_parts],
        }
    }

    /// The start and size of partition `p`'s block of an array of `dims`.
    fn block(&self, p: usize, dims: &[i64]) -> (Vec<i64>, Vec<i64>) {
        let Some(coords) = self.coords.get(p) else {
            return (vec![0; dims.len()], dims.to_vec());
        };
        let block: Vec<i64> = dims.iter().zip(&self.counts).map(|(d, c)| d / c).collect();
        let start = coords.iter().zip(&block).map(|(i, b)| i * b).collect();
        (start, block)
    }
}

/// Reads a GSPMD sharding: `{replicated}`, `{maximal device=D}` is refused,
/// and tilings `{devices=[a,b,…]<=[N]}`, `<=[r…]T(perm)`, explicit device
/// lists, with or without `last_tile_dim_replicate`.
fn gspmd_tiling(s: &str, rank: usize, n_parts: usize) -> Result<Tiling> {
    let body = s
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim();
    if body == "replicated" {
        return Ok(Tiling::replicated(rank, n_parts));
    }
    let Some(rest) = body.strip_prefix("devices=[") else {
        bail!("only {{replicated}} and {{devices=[…]…}} shardings are supported");
    };
    let (tile, rest) = rest.split_once(']').context("unclosed tile shape")?;
    let tile = int_list(tile)?;
    let (list, flags) = rest.split_once(' ').unwrap_or((rest, ""));
    let replicate_last = match flags.trim() {
        "" => false,
        "last_tile_dim_replicate" | "last_tile_dims={replicated}" => true,
        f => bail!("unsupported sharding flags {f}"),
    };
    // Sizes are checked before anything is allocated by them.
    let n = checked_product(&tile).context("bad tile shape")?;
    ensure!(
        n == n_parts as i64,
        "the sharding is over {n} devices, the run has {n_parts} partitions (see --partitions)"
    );
    let devices = if let Some(iota) = list.strip_prefix("<=[") {
        let (reshape, perm) = iota.split_once(']').context("unclosed iota shape")?;
        let reshape = int_list(reshape)?;
        ensure!(
            checked_product(&reshape) == Some(n),
            "an iota of shape {reshape:?} for {n} devices"
        );
        let perm = match perm.strip_prefix("T(") {
            Some(p) => int_list(p.trim_end_matches(')'))?,
            None => (0..reshape.len() as i64).collect(),
        };
        transposed_iota(&reshape, &perm)?
    } else {
        int_list(list)?
    };
    ensure!(
        devices.len() as i64 == n,
        "{} devices for {n} tiles",
        devices.len()
    );
    let data_rank = tile.len() - usize::from(replicate_last);
    ensure!(
        data_rank == rank,
        "a {}-axis tiling of a rank-{rank} array",
        data_rank
    );
    let mut coords = vec![Vec::new(); n_parts];
    for (idx, &device) in devices.iter().enumerate() {
        let slot = coords
            .get_mut(device as usize)
            .context("device out of range")?;
        *slot = unravel(idx as i64, &tile)[..rank].to_vec();
    }
    Ok(Tiling {
        counts: tile[..rank].to_vec(),
        coords,
    })
}

/// Reads a Shardy sharding `#sdy.sharding<@mesh, [{"x"}, {}], replicated={…}>`
/// against its mesh (`sdy.mesh @mesh = <["x"=2, …], device_ids=[…]>` in the
/// module, or inline `mesh<[…]>`).
fn shardy_tiling(s: &str, module: &str, rank: usize, n_parts: usize) -> Result<Tiling> {
    let inner = s
        .strip_prefix("#sdy.sharding<")
        .context("not an #sdy.sharding")?
        .trim();
    let (mesh_text, rest) = if let Some(name) = inner.strip_prefix('@') {
        let name_end = name.find([',', '>']).unwrap_or(name.len());
        let (name, rest) = name.split_at(name_end);
        let decl = format!("sdy.mesh @{name} = ");
        let at = module
            .find(&decl)
            .with_context(|| format!("no mesh @{name} in the module"))?;
        let mesh = &module[at + decl.len()..];
        (&mesh[..close(mesh).context("unbalanced mesh")?], rest)
    } else if let Some(m) = inner.strip_prefix("mesh") {
        let end = close(m).context("unbalanced mesh")?;
        (&m[..end], &m[end..])
    } else {
        bail!("unrecognized mesh");
    };
    let (axes, sizes, device_ids) = parse_mesh(mesh_text)?;
    let n: i64 = sizes.iter().product();
    ensure!(
        n == n_parts as i64,
        "the mesh has {n} devices, the run has {n_parts} partitions (see --partitions)"
    );
    let rest = rest.trim_start_matches(',').trim_start();
    ensure!(rest.starts_with('['), "no dimension shardings");
    let dim_list = &rest[1..close(rest).context("unbalanced dimension shardings")? - 1];
    let dims: Vec<&str> = split_top(dim_list);
    let dims = if dims.len() == 1 && dims[0].trim().is_empty() {
        Vec::new()
    } else {
        dims
    };
    ensure!(
        dims.len() == rank,
        "{} dimension shardings for a rank-{rank} array",
        dims.len()
    );
    // Each tensor axis: the mesh axes it is split over, major to minor.
    let mut dim_axes = Vec::with_capacity(rank);
    for d in &dims {
        let d = d.trim();
        ensure!(
            d.starts_with('{'),
            "dimension sharding {d} is not a {{axes}} group"
        );
        let group = &d[..close(d).context("unbalanced dimension sharding")?];
        let mut ids = Vec::new();
        for name in split_top(&group[1..group.len() - 1]) {
            let name = name.trim();
            if name.is_empty() || name == "?" {
                continue;
            }
            ensure!(
                !name.contains(":("),
                "sub-axis {name} is not supported (only whole mesh axes are)"
            );
            let name = name.trim_matches('"');
            let i = axes
                .iter()
                .position(|a| a == name)
                .with_context(|| format!("no axis {name}"))?;
            ids.push(i);
        }
        dim_axes.push(ids);
    }
    let counts = dim_axes
        .iter()
        .map(|ids| ids.iter().map(|&i| sizes[i]).product())
        .collect();
    let mut coords = vec![Vec::new(); n_parts];
    for (idx, &device) in device_ids.iter().enumerate() {
        let mesh_coord = unravel(idx as i64, &sizes);
        let block = dim_axes
            .iter()
            .map(|ids| ids.iter().fold(0, |acc, &i| acc * sizes[i] + mesh_coord[i]))
            .collect();
        *coords
            .get_mut(device as usize)
            .context("device out of range")? = block;
    }
    Ok(Tiling { counts, coords })
}

/// Reads `<["x"=2, "y"=2], device_ids=[…]>`: axis names, sizes, device ids.
fn parse_mesh(mesh: &str) -> Result<(Vec<String>, Vec<i64>, Vec<i64>)> {
    let body = mesh
        .trim()
        .strip_prefix('<')
        .and_then(|m| m.strip_suffix('>'));
    let body = body.context("unrecognized mesh")?.trim();
    ensure!(body.starts_with('['), "unrecognized mesh {mesh}");
    let end = close(body).context("unbalanced mesh")?;
    let (mut axes, mut sizes) = (Vec::new(), Vec::new());
    for axis in split_top(&body[1..end - 1]) {
        if axis.trim().is_empty() {
            continue;
        }
        let (name, size) = axis.split_once('=').context("unrecognized mesh axis")?;
        axes.push(name.trim().trim_matches('"').to_string());
        sizes.push(
            size.trim()
                .parse::<i64>()
                .context("unrecognized mesh axis size")?,
        );
    }
    let n: i64 = sizes.iter().product();
    let ids = match body[end..].split_once("device_ids=[") {
        Some((_, ids)) => int_list(ids.split(']').next().unwrap_or(""))?,
        None => (0..n).collect(),
    };
    ensure!(
        ids.len() as i64 == n,
        "a mesh of {n} devices with {} device ids",
        ids.len()
    );
    Ok((axes, sizes, ids))
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

/// The product of `dims`, if every one is at least 1 and it fits an `i64`.
fn checked_product(dims: &[i64]) -> Option<i64> {
    dims.iter().try_fold(1i64, |acc, &d| {
        (d >= 1).then(|| acc.checked_mul(d)).flatten()
    })
}

/// `iota(product(shape)).reshape(shape).transpose(perm)`, flattened.
fn transposed_iota(shape: &[i64], perm: &[i64]) -> Result<Vec<i64>> {
    let mut sorted = perm.to_vec();
    sorted.sort_unstable();
    ensure!(
        sorted.iter().copied().eq(0..shape.len() as i64),
        "bad transpose {perm:?} of shape {shape:?}"
    );
    let t_shape: Vec<i64> = perm.iter().map(|&p| shape[p as usize]).collect();
    let n: i64 = shape.iter().product();
    Ok((0..n)
        .map(|j| {
            let t = unravel(j, &t_shape);
            let mut c = vec![0; shape.len()];
            for (i, &p) in perm.iter().enumerate() {
                c[p as usize] = t[i];
            }
            c.iter().zip(shape).fold(0, |acc, (&ci, &s)| acc * s + ci)
        })
        .collect())
}

/// The C-order coordinates of linear index `i` in `shape`.
fn unravel(mut i: i64, shape: &[i64]) -> Vec<i64> {
    let mut c = vec![0; shape.len()];
    for (ci, &s) in c.iter_mut().zip(shape).rev() {
        *ci = i % s;
        i /= s;
    }
    c
}

/// Parses `1,2,3` (spaces allowed).
fn int_list(s: &str) -> Result<Vec<i64>> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<i64>().with_context(|| format!("bad number {t}")))
        .collect()
}

/// The bytes of `s` outside string literals, each with its index and the
/// bracket depth after it: `(`, `[`, `{` and `<` open; `)`, `]`, `}` and a `>`
/// that is not the end of an arrow `->` close. A string's opening quote is
/// outside it.
fn outside_strings(s: &str) -> impl Iterator<Item = (usize, u8, i64)> + '_ {
    let b = s.as_bytes();
    let (mut depth, mut in_str, mut escaped) = (0i64, false, false);
    b.iter().enumerate().filter_map(move |(i, &c)| {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            return None;
        }
        match c {
            b'"' => in_str = true,
            b'(' | b'[' | b'{' | b'<' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'>' if i == 0 || b[i - 1] != b'-' => depth -= 1,
            _ => {}
        }
        Some((i, c, depth))
    })
}

/// The byte length of the bracketed group that opens at `s[0]` (`(`, `[`,
/// `{` or `<`), skipping string literals and the arrows `->`.
fn close(s: &str) -> Option<usize> {
    let (i, _, depth) = outside_strings(s).find(|&(_, _, depth)| depth <= 0)?;
    (depth == 0).then_some(i + 1)
}

/// Splits `s` at the commas outside brackets and strings.
fn split_top(s: &str) -> Vec<&str> {
    let mut res = Vec::new();
    let mut from = 0;
    for (i, c, depth) in outside_strings(s) {
        if c == b',' && depth == 0 {
            res.push(&s[from..i]);
            from = i + 1;
        }
    }
    res.push(&s[from..]);
    res
}

/// `tensor<2x3xf32>`.
fn tensor_str(ty: ElementType, dims: &[i64]) -> String {
    let mut s = String::from("tensor<");
    for d in dims {
        s += &format!("{d}x");
    }
    s + ty.mlir_name() + ">"
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
    fn gspmd_transposed_iota() {
        // Tile [2,2] over devices iota(4).reshape(2,2).T = [0,2,1,3]:
        // device 1 sits at tile (1, 0).
        let t = gspmd_tiling("{devices=[2,2]<=[2,2]T(1,0)}", 2, 4).unwrap();
        assert_eq!(t.counts, [2, 2]);
        assert_eq!(t.coords, [vec![0, 0], vec![1, 0], vec![0, 1], vec![1, 1]]);
        let t = gspmd_tiling("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", 2, 4).unwrap();
        assert_eq!(t.coords, [vec![0, 0], vec![0, 0], vec![1, 0], vec![1, 0]]);
    }

    #[test]
    fn gspmd_sizes_are_checked_before_allocating() {
        // An iota over 1e11 devices, a tile product that overflows, a zero.
        for (sharding, want) in [
            (
                "{devices=[2,2]<=[100000000000]}",
                "an iota of shape [100000000000] for 4 devices",
            ),
            ("{devices=[4294967296,4294967296]<=[4]}", "bad tile shape"),
            ("{devices=[0,2]<=[0]}", "bad tile shape"),
        ] {
            let err = gspmd_tiling(sharding, 2, 4).unwrap_err();
            assert!(format!("{err:#}").contains(want), "{sharding}: {err:#}");
        }
    }

    #[test]
    fn shardy_two_axes() {
        let module = r#"sdy.mesh @mesh = <["x"=2, "y"=2]> {x}"#;
        let t = shardy_tiling(r#"#sdy.sharding<@mesh, [{"y"}, {"x"}]>"#, module, 2, 4).unwrap();
        assert_eq!(t.coords, [vec![0, 0], vec![1, 0], vec![0, 1], vec![1, 1]]);
        let t = shardy_tiling(r#"#sdy.sharding<@mesh, [{"x", "y"}, {}]>"#, module, 2, 4).unwrap();
        assert_eq!(t.counts, [4, 1]);
        assert_eq!(t.coords, [vec![0, 0], vec![1, 0], vec![2, 0], vec![3, 0]]);
    }

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
