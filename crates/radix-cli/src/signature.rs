//! The `@main` signature of a StableHLO module as `radix run` reads it from
//! the text: argument and result types, and their shardings (GSPMD
//! `mhlo.sharding` strings, Shardy `sdy.sharding` attributes with the
//! module's `sdy.mesh`es), turned into the block each partition holds.
//! Module text is user input: every size is checked before anything is
//! allocated by it, and nothing here panics on what it reads.

use anyhow::{Context, Result, bail, ensure};
use radix_pjrt::ElementType;

use crate::npy::Array;

/// The most partitions `radix run` accepts.
pub(crate) const MAX_PARTITIONS: usize = 4096;

/// The module's `mhlo.num_partitions` attribute.
pub(crate) fn module_partitions(text: &str) -> Option<usize> {
    let rest = &text[text.find("mhlo.num_partitions = ")? + "mhlo.num_partitions = ".len()..];
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

/// `@main`'s arguments and results.
#[derive(Debug)]
pub(crate) struct Signature {
    pub(crate) args: Vec<Param>,
    pub(crate) results: Vec<Param>,
}

/// One argument or result of `@main`: its type and sharding attribute.
#[derive(Debug)]
pub(crate) struct Param {
    pub(crate) ty: ElementType,
    pub(crate) dims: Vec<i64>,
    /// `mhlo.sharding`'s string, or `sdy.sharding`'s `#sdy.sharding<…>`.
    pub(crate) sharding: Option<ShardingAttr>,
}

/// A sharding attribute as written, read against the mesh when needed.
#[derive(Debug)]
pub(crate) enum ShardingAttr {
    Gspmd(String),
    Shardy(String),
}

impl Signature {
    /// Reads the signature of `func.func [public] @main` in pretty MLIR text;
    /// `None` when there is none in that form (generic form, bytecode).
    pub(crate) fn parse(text: &str) -> Result<Option<Signature>> {
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
    pub(crate) fn check_inputs(&self, inputs: &[(String, Array)]) -> Result<()> {
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
        // Negative dims, or a size past the address space.
        radix_pjrt::byte_len(ty, &dims).with_context(|| format!("type {text}"))?;
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
    pub(crate) fn tiling(&self, module: &str, n_parts: usize) -> Result<Tiling> {
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
pub(crate) struct Tiling {
    /// The number of blocks along each axis.
    counts: Vec<i64>,
    /// For each partition, its block's index along each axis.
    coords: Vec<Vec<i64>>,
}

impl Tiling {
    /// The whole array on each of `n_parts` partitions.
    pub(crate) fn replicated(rank: usize, n_parts: usize) -> Tiling {
        Tiling {
            counts: vec![1; rank],
            coords: vec![vec![0; rank]; n_parts],
        }
    }

    /// The start and size of partition `p`'s block of an array of `dims`.
    pub(crate) fn block(&self, p: usize, dims: &[i64]) -> (Vec<i64>, Vec<i64>) {
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
            .get_mut(usize::try_from(device).unwrap_or(usize::MAX))
            .with_context(|| format!("device {device} is out of range for {n_parts} partitions"))?;
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
    // `parse_mesh` checked that the product fits.
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
            .get_mut(usize::try_from(device).unwrap_or(usize::MAX))
            .with_context(|| {
                format!("device {device} is out of range for {n_parts} partitions")
            })? = block;
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
    // The sizes are checked before anything is allocated by them: a mesh
    // of 2^40 devices would otherwise make a list of 2^40 device ids.
    if let Some((name, size)) = axes.iter().zip(&sizes).find(|&(_, &s)| s < 1) {
        bail!("mesh axis {name} has size {size}");
    }
    let n = checked_product(&sizes)
        .filter(|&n| n <= MAX_PARTITIONS as i64)
        .with_context(|| {
            format!("a mesh of {sizes:?} devices: radix runs at most {MAX_PARTITIONS}")
        })?;
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
    // Anything else at `s[0]` (a character of several bytes, say) opens no
    // group, and its end is no place to cut the text.
    if !s.starts_with(['(', '[', '{', '<']) {
        return None;
    }
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
pub(crate) fn tensor_str(ty: ElementType, dims: &[i64]) -> String {
    let mut s = String::from("tensor<");
    for d in dims {
        s += &format!("{d}x");
    }
    s + ty.mlir_name() + ">"
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
    fn shardy_mesh_sizes_are_checked_before_allocating() {
        let sharding = r#"#sdy.sharding<@mesh, [{"x"}, {}]>"#;
        for (mesh, want) in [
            (
                r#"<["x"=1099511627776]>"#,
                "a mesh of [1099511627776] devices",
            ),
            (
                r#"<["x"=4611686018427387905, "y"=4]>"#,
                "radix runs at most 4096",
            ),
            (r#"<["x"=0]>"#, "mesh axis x has size 0"),
            (r#"<["x"=-2, "y"=-1]>"#, "mesh axis x has size -2"),
        ] {
            let module = format!("sdy.mesh @mesh = {mesh} {{x}}");
            let err = shardy_tiling(sharding, &module, 2, 2).unwrap_err();
            assert!(format!("{err:#}").contains(want), "{mesh}: {err:#}");
        }
        // A character of several bytes where a bracket should open a group.
        let err = shardy_tiling("#sdy.sharding<mesh\u{e9}[]>", "", 2, 2).unwrap_err();
        assert!(format!("{err:#}").contains("unbalanced mesh"), "{err:#}");
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
}
