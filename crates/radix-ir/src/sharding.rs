//! Shardings: how a tensor's axes map onto a mesh of devices, as the
//! attributes XLA's partitioners read: Shardy's (`sdy.mesh`,
//! `#sdy.sharding`, the default, as JAX and ZML emit) or GSPMD's
//! (`mhlo.sharding` strings), chosen by [`Partitioner`].
//!
//! A [`Mesh`] arranges `N` partitions as a grid (`[4]`, `[2, 2]`). A tensor
//! axis may be split along one mesh axis; mesh axes no tensor axis uses hold
//! replicas. Shardy names mesh axis `m` `"m{m}"` in a mesh `@mesh` whose
//! devices are in order: `#sdy.sharding<@mesh, [{"m0"}, {}]>`. GSPMD's
//! string is HLO's iota tile assignment:
//! `{devices=[t_0,..,t_r-1(,R)]<=[m_0,..]T(perm)( last_tile_dim_replicate)}`.
//!
//! A [`crate::Shape`] marks the mesh axis each of its axes is split along
//! ([`crate::Shape::shard`]); radix's `Platform` with a mesh
//! (`Platform::with_mesh`) compiles programs for that many
//! partitions and uploads a `Buffer` as one block per device (the
//! whole array where nothing is split). [`slice_block`] and [`place_block`]
//! cut such blocks out of a dense host array and put them back.

use std::fmt::Write;

use crate::Shape;

/// Which of XLA's partitioners splits a program over its mesh, and so
/// which sharding attributes radix prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Partitioner {
    /// Shardy: an `sdy.mesh` in the module, `sdy.sharding` on arguments and
    /// results, `sdy.sharding_constraint` inside.
    #[default]
    Shardy,
    /// GSPMD: `mhlo.sharding` strings, constraints as `@Sharding` custom
    /// calls.
    Gspmd,
}

/// A grid of partitions: device `d` (in the compile options' device
/// assignment) sits at the row-major position `d` of `dims`. A mesh may
/// span the processes of a job ([`Mesh::spanning_processes`]): its axis 0
/// is then the processes, each holding the devices of the other axes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mesh {
    dims: Vec<usize>,
    spans_processes: bool,
}

impl Mesh {
    /// A mesh of `dims` (each at least 1).
    pub fn new(dims: &[usize]) -> Mesh {
        Mesh {
            dims: dims.iter().map(|&d| d.max(1)).collect(),
            spans_processes: false,
        }
    }

    /// A mesh over `processes` processes (its axis 0), each holding a mesh
    /// of `local` devices (its other axes, from 1).
    pub fn spanning_processes(processes: usize, local: &[usize]) -> Mesh {
        let mut mesh = Mesh::new(&[&[processes][..], local].concat());
        mesh.spans_processes = true;
        mesh
    }

    /// Whether axis 0 is the processes of a job.
    pub fn spans_processes(&self) -> bool {
        self.spans_processes
    }

    /// The mesh of one process's devices: without the process axis of a
    /// mesh spanning processes, else the mesh itself.
    pub fn local(&self) -> Mesh {
        match self.spans_processes {
            true => Mesh::new(&self.dims[1..]),
            false => self.clone(),
        }
    }

    /// The number of partitions.
    pub fn n_devices(&self) -> usize {
        self.dims.iter().product()
    }

    /// The sizes of the mesh axes.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The `mhlo.sharding` of a tensor whose axis `i` is split along mesh
    /// axis `axes[i]` (`None`: not split); an error if a mesh axis is named
    /// twice or does not exist, or a split axis of size `sizes[i]` does not
    /// divide.
    pub fn sharding(&self, axes: &[Option<usize>], sizes: &[i64]) -> Result<String, String> {
        self.check(axes, sizes)?;
        let mut used = vec![false; self.dims.len()];
        let mut perm = vec![];
        let mut tiles = vec![];
        for a in axes {
            match *a {
                None => tiles.push(1),
                Some(m) => {
                    used[m] = true;
                    perm.push(m);
                    tiles.push(self.dims[m]);
                }
            }
        }
        if perm.is_empty() {
            return Ok("{replicated}".into());
        }
        let replicas: usize = (0..self.dims.len())
            .filter(|&m| !used[m])
            .map(|m| self.dims[m])
            .product();
        perm.extend((0..self.dims.len()).filter(|&m| !used[m]));
        let mut s = String::from("{devices=[");
        let list = |v: &[usize]| {
            v.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        s.push_str(&list(&tiles));
        if replicas > 1 {
            let _ = write!(s, ",{replicas}");
        }
        if perm.iter().enumerate().any(|(k, &m)| k != m) {
            let _ = write!(s, "]<=[{}]T({})", list(&self.dims), list(&perm));
        } else {
            // Without a transpose the iota over the mesh is the iota over N.
            let _ = write!(s, "]<=[{}]", self.n_devices());
        }
        if replicas > 1 {
            s.push_str(" last_tile_dim_replicate");
        }
        s.push('}');
        Ok(s)
    }

    /// `Err` unless each split axis names a mesh axis there is, no mesh
    /// axis splits two, and each split axis of size `sizes[i]` divides.
    fn check(&self, axes: &[Option<usize>], sizes: &[i64]) -> Result<(), String> {
        let mut used = vec![false; self.dims.len()];
        for (i, a) in axes.iter().enumerate() {
            let Some(m) = *a else { continue };
            let Some(&n) = self.dims.get(m) else {
                return Err(format!("no mesh axis {m} in {:?}", self.dims));
            };
            if std::mem::replace(&mut used[m], true) {
                return Err(format!("mesh axis {m} shards two axes"));
            }
            if sizes[i] % n as i64 != 0 {
                return Err(format!(
                    "axis {i} of size {} does not split {n} ways",
                    sizes[i]
                ));
            }
        }
        Ok(())
    }

    /// The `mhlo.sharding` of `shape` (see [`Mesh::sharding`]).
    pub fn sharding_of(&self, shape: &Shape) -> Result<String, String> {
        self.sharding(&shape.mesh_axes(), shape.dims())
            .map_err(|e| format!("{shape} on mesh {:?}: {e}", self.dims))
    }

    /// Shardy's sharding of `shape` on the mesh [`Mesh::sdy_mesh`] declares:
    /// `#sdy.sharding<@mesh, [{"m0"}, {}]>` for rows split along mesh axis 0;
    /// the same errors as [`Mesh::sharding_of`].
    pub fn sdy_sharding_of(&self, shape: &Shape) -> Result<String, String> {
        let axes = shape.mesh_axes();
        self.check(&axes, shape.dims())
            .map_err(|e| format!("{shape} on mesh {:?}: {e}", self.dims))?;
        Ok(format!("#sdy.sharding{}", self.sdy_sharding(&axes)))
    }

    /// Shardy's sharding of a tensor whose axis `i` is split along mesh
    /// axis `axes[i]`, without its `#sdy.sharding` prefix (as a
    /// `#sdy.sharding_per_value` lists it): `<@mesh, [{"m0"}, {}]>`.
    pub fn sdy_sharding(&self, axes: &[Option<usize>]) -> String {
        let dims: Vec<String> = axes
            .iter()
            .map(|a| a.map_or("{}".into(), |m| format!("{{\"m{m}\"}}")))
            .collect();
        format!("<@mesh, [{}]>", dims.join(", "))
    }

    /// The op that declares the mesh to Shardy, `@mesh` with axes `"m0"`,
    /// `"m1"`, .. of this mesh's sizes, its devices in order.
    pub fn sdy_mesh(&self) -> String {
        let axes: Vec<String> = self
            .dims
            .iter()
            .enumerate()
            .map(|(m, n)| format!("\"m{m}\"={n}"))
            .collect();
        format!(
            "\"sdy.mesh\"() {{mesh = #sdy.mesh<[{}]>, sym_name = \"mesh\"}} : () -> ()",
            axes.join(", ")
        )
    }

    /// Device `device`'s position along each mesh axis: it sits at the
    /// row-major position `device` of the mesh.
    pub fn coords(&self, device: usize) -> Vec<usize> {
        let mut coords = vec![0; self.dims.len()];
        let mut rest = device;
        for (c, &n) in coords.iter_mut().zip(&self.dims).rev() {
            *c = rest % n;
            rest /= n;
        }
        coords
    }

    /// The block of an array of `shape` that device `device` holds: its
    /// start and size along each axis. Device `d` sits at the row-major
    /// position `d` of the mesh, so an axis split along mesh axis `m` is
    /// cut into `dims[m]` blocks and the device holds block `coords[m]`.
    /// (The shape must divide; see [`Mesh::sharding_of`].)
    pub fn block(&self, shape: &Shape, device: usize) -> (Vec<i64>, Vec<i64>) {
        let coords = self.coords(device);
        let mut start = vec![];
        let mut size = vec![];
        for (&d, m) in shape.dims().iter().zip(shape.mesh_axes()) {
            match m.and_then(|m| Some((self.dims.get(m)?, coords[m]))) {
                Some((&n, c)) => {
                    let b = d / n as i64;
                    start.push(c as i64 * b);
                    size.push(b);
                }
                None => {
                    start.push(0);
                    size.push(d);
                }
            }
        }
        (start, size)
    }
}

/// Copies the block at `start` of size `block` out of a C-order array of
/// `dims` with elements of `size` bytes.
pub fn slice_block(
    data: &[u8],
    dims: &[i64],
    size: usize,
    start: &[i64],
    block: &[i64],
) -> Vec<u8> {
    if block == dims {
        return data.to_vec();
    }
    let mut out = Vec::with_capacity(block.iter().product::<i64>() as usize * size);
    for_each_row(dims, size, start, block, |src, len| {
        out.extend_from_slice(&data[src..src + len])
    });
    out
}

/// Copies `src`, a block of size `block`, to `start` in a C-order array of
/// `dims` with elements of `size` bytes.
pub fn place_block(
    data: &mut [u8],
    dims: &[i64],
    size: usize,
    start: &[i64],
    block: &[i64],
    src: &[u8],
) {
    let mut at = 0;
    for_each_row(dims, size, start, block, |dst, len| {
        data[dst..dst + len].copy_from_slice(&src[at..at + len]);
        at += len;
    });
}

/// Calls `f(byte offset, byte length)` for each contiguous innermost row of a
/// block, in C order.
fn for_each_row(
    dims: &[i64],
    size: usize,
    start: &[i64],
    block: &[i64],
    mut f: impl FnMut(usize, usize),
) {
    let rank = dims.len();
    if block.contains(&0) {
        return;
    }
    let row = block.last().map_or(1, |&b| b as usize) * size;
    let outer = rank.saturating_sub(1);
    let mut index = vec![0i64; outer];
    loop {
        let mut offset = 0i64;
        for d in 0..rank {
            let i = if d < outer { index[d] } else { 0 };
            offset = offset * dims[d] + start[d] + i;
        }
        f(offset as usize * size, row);
        let mut d = outer;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < block[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Mesh;
    use expect_test::expect;

    #[test]
    fn strings_name_a_real_mesh() {
        let m4 = Mesh::new(&[4]);
        expect!["{replicated}"].assert_eq(&m4.sharding(&[None, None], &[8, 2]).unwrap());
        expect!["{devices=[4,1]<=[4]}"].assert_eq(&m4.sharding(&[Some(0), None], &[8, 2]).unwrap());
        let m22 = Mesh::new(&[2, 2]);
        // Two axes over a 2x2 mesh of 4 devices (the seed wrote `<=[2]`).
        expect!["{devices=[2,2]<=[4]}"]
            .assert_eq(&m22.sharding(&[Some(0), Some(1)], &[8, 2]).unwrap());
        expect!["{devices=[2,2]<=[2,2]T(1,0)}"]
            .assert_eq(&m22.sharding(&[Some(1), Some(0)], &[8, 2]).unwrap());
        expect!["{devices=[2,1,2]<=[4] last_tile_dim_replicate}"]
            .assert_eq(&m22.sharding(&[Some(0), None], &[8, 2]).unwrap());
        expect!["{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"]
            .assert_eq(&m22.sharding(&[None, Some(1)], &[8, 2]).unwrap());
        expect!["axis 0 of size 6 does not split 4 ways"]
            .assert_eq(&m4.sharding(&[Some(0)], &[6]).unwrap_err());
        expect!["mesh axis 0 shards two axes"]
            .assert_eq(&m22.sharding(&[Some(0), Some(0)], &[8, 2]).unwrap_err());
    }
}
