//! Tensor parallelism, as Megatron-LM splits a transformer: each process of
//! a job holds some of every block's attention heads and some of its MLP's
//! hidden units, and the embedding, the norms and the head whole.
//!
//! A block's query, key, value, gate and up projections are split by their
//! output rows (column parallel: a process computes its heads and units
//! from the whole input), its attention output and down projections by
//! their input columns (row parallel: a process's share of each output
//! sum). The two partial sums are added over the processes
//! ([`Partials::SummedOverProcesses`], one `all_reduce` per block half),
//! so every process holds the same residual stream, logits and sampled
//! tokens, and no other step talks between them.
//!
//! Heads are split in whole key/value groups, so that each process's query
//! heads share its key/value heads in the model's ratio: with fewer
//! key/value heads than processes (Gemma 3 270M has one), each key/value
//! head is held by several processes, each with some of its query heads.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use radix::Tensor;
use radix::collective::{ReduceOp, all_reduce};
use radix::io::{Error as IoError, HostTensor, TensorSource};
use radix::quant::Format;

use super::DecoderConfig;
use crate::{Error, Result};

/// How a block's attention and MLP outputs are made whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Partials {
    /// They are whole: the block runs in one process.
    #[default]
    Whole,
    /// Each process computed a partial sum of them (its heads' or hidden
    /// units' share): they are summed over the job's processes.
    SummedOverProcesses,
}

impl Partials {
    /// `x` made whole.
    pub(crate) fn sum(self, x: Tensor) -> Tensor {
        match self {
            Partials::Whole => x,
            Partials::SummedOverProcesses => all_reduce(x, ReduceOp::Sum),
        }
    }
}

/// One process's share of a decoder: which query heads, key/value heads and
/// MLP hidden units of every block it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The query heads.
    pub q_heads: Range<i64>,
    /// The key/value heads.
    pub kv_heads: Range<i64>,
    /// The MLP's hidden units.
    pub ffn: Range<i64>,
}

impl DecoderConfig {
    /// Process `rank`'s share of this decoder split over `size` processes:
    /// its configuration (its heads and hidden units, partial sums made
    /// whole over the processes) and the share. An `Err` if the heads
    /// cannot be split that way.
    pub fn shard(&self, rank: usize, size: usize) -> Result<(DecoderConfig, Shard)> {
        let (heads, kv) = (self.n_heads, self.n_kv_heads);
        let n = size as i64;
        let cannot = |why: &str| {
            Error::Input(format!(
                "{heads} query and {kv} key/value heads cannot be split over {size} processes: {why}"
            ))
        };
        if size == 0 || rank >= size {
            return Err(Error::Input(format!("process {rank} of {size}")));
        }
        if kv == 0 || heads % kv != 0 {
            return Err(cannot("the query heads are not whole groups"));
        }
        let group = heads / kv;
        let (q_heads, kv_heads) = if kv >= n {
            let kv_heads = part(kv, size, rank);
            (kv_heads.start * group..kv_heads.end * group, kv_heads)
        } else {
            // Each key/value head held by `per` processes, each with
            // `group / per` of its query heads.
            let per = n / kv;
            if n % kv != 0 || group % per != 0 {
                return Err(cannot(
                    "with fewer key/value heads than processes, the processes must split each group evenly",
                ));
            }
            let (head, i) = (rank as i64 / per, rank as i64 % per);
            let q = head * group + i * (group / per);
            (q..q + group / per, head..head + 1)
        };
        // Hidden units in whole 256-wide pieces where they go round, so that
        // the down projection's columns split between quantized blocks.
        let unit = [256, 32, 1]
            .into_iter()
            .find(|u| self.ffn_dim % u == 0 && self.ffn_dim / u >= n)
            .ok_or_else(|| cannot("fewer MLP units than processes"))?;
        let units = part(self.ffn_dim / unit, size, rank);
        let ffn = units.start * unit..units.end * unit;
        let shard = Shard {
            q_heads,
            kv_heads,
            ffn,
        };
        let cfg = DecoderConfig {
            n_heads: shard.q_heads.end - shard.q_heads.start,
            n_kv_heads: shard.kv_heads.end - shard.kv_heads.start,
            ffn_dim: shard.ffn.end - shard.ffn.start,
            partials: Partials::SummedOverProcesses,
            ..self.clone()
        };
        Ok((cfg, shard))
    }
}

/// Part `rank` of `0..n` cut into `size` contiguous parts as even as can be.
fn part(n: i64, size: usize, rank: usize) -> Range<i64> {
    let at = |r: usize| n * r as i64 / size as i64;
    at(rank)..at(rank + 1)
}

impl Shard {
    /// What of each stored tensor this share holds, by the model's path
    /// (`blk.3.attn_q.weight`) for `layers` blocks of `head_dim`-wide heads.
    fn slices(&self, layers: usize, head_dim: i64) -> Vec<(String, Slice)> {
        let heads = |r: &Range<i64>| r.start * head_dim..r.end * head_dim;
        let mut out = vec![];
        for i in 0..layers {
            let mut add = |name: &str, slice: Slice| {
                for part in ["weight", "bias"] {
                    out.push((format!("blk.{i}.{name}.{part}"), slice.clone()));
                }
            };
            add("attn_q", Slice::Rows(heads(&self.q_heads)));
            add("attn_k", Slice::Rows(heads(&self.kv_heads)));
            add("attn_v", Slice::Rows(heads(&self.kv_heads)));
            add("ffn_gate", Slice::Rows(self.ffn.clone()));
            add("ffn_up", Slice::Rows(self.ffn.clone()));
            // A row-parallel layer's bias would be added once per process.
            out.push((
                format!("blk.{i}.attn_output.weight"),
                Slice::Columns(heads(&self.q_heads)),
            ));
            out.push((
                format!("blk.{i}.ffn_down.weight"),
                Slice::Columns(self.ffn.clone()),
            ));
        }
        out
    }

    /// `source` as this share reads it: the tensors `names` maps the
    /// share's split paths to hold only its rows or columns.
    pub(crate) fn source(
        &self,
        source: Box<dyn TensorSource>,
        cfg: &DecoderConfig,
        names: &dyn Fn(&str) -> String,
    ) -> Box<dyn TensorSource> {
        let slices = self
            .slices(cfg.n_layers, cfg.head_dim)
            .into_iter()
            .map(|(path, slice)| (names(&path), slice))
            .collect();
        Box::new(Sharded {
            inner: source,
            slices,
        })
    }
}

/// The part of a stored tensor a process holds.
#[derive(Clone, Debug)]
enum Slice {
    /// These rows (the first axis).
    Rows(Range<i64>),
    /// These columns (the last axis).
    Columns(Range<i64>),
}

impl Slice {
    fn dims(&self, dims: &[i64]) -> Vec<i64> {
        let mut dims = dims.to_vec();
        let (axis, r) = match self {
            Slice::Rows(r) => (0, r),
            Slice::Columns(r) => (dims.len() - 1, r),
        };
        dims[axis] = r.end - r.start;
        dims
    }

    /// The same part of a row of blocks of `len` elements in `bytes`
    /// bytes each, counted in bytes (the blocks kept whole).
    fn in_bytes(&self, (len, bytes): (usize, usize)) -> Slice {
        let at = |i: i64| i / len as i64 * bytes as i64;
        match self {
            Slice::Rows(r) => Slice::Rows(r.clone()),
            Slice::Columns(r) => Slice::Columns(at(r.start)..at(r.end)),
        }
    }

    /// This part of `t`, a tensor of its own.
    fn cut(&self, t: &HostTensor) -> HostTensor {
        let (bytes, size) = (t.bytes(), t.dtype().size_in_bytes());
        let rows = t.dims().first().copied().unwrap_or(1).max(1) as usize;
        let row_bytes = bytes.len() / rows;
        let cut: Vec<u8> = match self {
            Slice::Rows(r) => {
                bytes[r.start as usize * row_bytes..r.end as usize * row_bytes].to_vec()
            }
            Slice::Columns(r) => {
                let (a, b) = (r.start as usize * size, r.end as usize * size);
                bytes
                    .chunks(row_bytes)
                    .flat_map(|row| &row[a..b])
                    .copied()
                    .collect()
            }
        };
        HostTensor::from_bytes(t.dtype(), &self.dims(t.dims()), &cut)
    }
}

/// A source whose split tensors read as one process's part of them.
struct Sharded {
    inner: Box<dyn TensorSource>,
    slices: HashMap<String, Slice>,
}

impl Sharded {
    /// Whether this process's part of `name` keeps its blocks of `format`
    /// whole: a cut of columns that falls between blocks (a cut of rows
    /// always does).
    fn keeps_blocks_whole(&self, name: &str, format: Format) -> bool {
        match self.slices.get(name) {
            Some(Slice::Columns(r)) => {
                let len = format.block_len() as i64;
                r.start % len == 0 && r.end % len == 0
            }
            _ => true,
        }
    }
}

impl TensorSource for Sharded {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn file_of(&self, name: &str) -> &Path {
        self.inner.file_of(name)
    }

    fn names(&self) -> Vec<String> {
        self.inner.names()
    }

    fn dims(&self, name: &str) -> Option<Vec<i64>> {
        let dims = self.inner.dims(name)?;
        Some(match self.slices.get(name) {
            Some(slice) => slice.dims(&dims),
            None => dims,
        })
    }

    fn tensor(&self, name: &str) -> radix::io::Result<Option<HostTensor>> {
        let Some(t) = self.inner.tensor(name)? else {
            return Ok(None);
        };
        let Some(slice) = self.slices.get(name) else {
            return Ok(Some(t));
        };
        Ok(Some(slice.cut(&t)))
    }

    /// The stored format, unless this process's columns split its blocks:
    /// then f32 (the tensor is read dequantized and cut).
    fn format(&self, name: &str) -> Option<Format> {
        let format = self.inner.format(name)?;
        if self.keeps_blocks_whole(name, format) {
            Some(format)
        } else {
            Some(Format::F32)
        }
    }

    fn blocks(&self, name: &str) -> radix::io::Result<Option<(Format, HostTensor)>> {
        let Some((format, t)) = self.inner.blocks(name)? else {
            return Ok(None);
        };
        let Some(slice) = self.slices.get(name) else {
            return Ok(Some((format, t)));
        };
        if !self.keeps_blocks_whole(name, format) {
            return Err(IoError::UnsupportedType {
                path: self.file_of(name).to_path_buf(),
                tensor: name.to_string(),
                ty: format.name().to_string(),
                supported: "blocks whole within a process's columns",
            });
        }
        // `t` is rows of bytes: cut them where the blocks start and end.
        let unit = (format.block_len(), format.block_bytes());
        Ok(Some((format, slice.in_bytes(unit).cut(&t))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transformer::Arch;

    fn shards(heads: (i64, i64), ffn: i64, size: usize) -> Vec<Shard> {
        let cfg = DecoderConfig::new(Arch::Llama, 1, heads.0 * 64, heads, ffn, 10);
        (0..size).map(|r| cfg.shard(r, size).unwrap().1).collect()
    }

    #[test]
    fn heads_split_in_whole_groups() {
        // SmolLM2: 9 query heads in 3 groups.
        let s = shards((9, 3), 1536, 2);
        assert_eq!((s[0].kv_heads.clone(), s[0].q_heads.clone()), (0..1, 0..3));
        assert_eq!((s[1].kv_heads.clone(), s[1].q_heads.clone()), (1..3, 3..9));
        assert_eq!((s[0].ffn.clone(), s[1].ffn.clone()), (0..768, 768..1536));
        // Gemma 3 270M: 4 query heads sharing one key/value head.
        let s = shards((4, 1), 2048, 2);
        assert_eq!((s[0].kv_heads.clone(), s[0].q_heads.clone()), (0..1, 0..2));
        assert_eq!((s[1].kv_heads.clone(), s[1].q_heads.clone()), (0..1, 2..4));
    }

    /// A cut of columns through rows of blocks takes whole blocks' bytes
    /// from every row; a cut of rows takes whole rows.
    #[test]
    fn cuts_of_blocks_take_whole_blocks() {
        // 2 rows of 4 Q4_0 blocks (32 values in 18 bytes each).
        let bytes: Vec<u8> = (0..2 * 4 * 18).map(|i| i as u8).collect();
        let t = HostTensor::from_slice(&[2, 72], &bytes);
        let unit = (Format::Q4_0.block_len(), Format::Q4_0.block_bytes());
        let cols = Slice::Columns(32..96).in_bytes(unit).cut(&t);
        assert_eq!(cols.dims(), &[2, 36]);
        let want: Vec<u8> = [&bytes[18..54], &bytes[72 + 18..72 + 54]].concat();
        assert_eq!(cols.bytes(), &want[..]);
        let rows = Slice::Rows(1..2).in_bytes(unit).cut(&t);
        assert_eq!((rows.dims(), rows.bytes()), (&[1, 72][..], &bytes[72..]));
        // An f32 tensor's columns, counted in values.
        let f = HostTensor::from_slice(&[2, 3], &[0f32, 1., 2., 3., 4., 5.]);
        let cut = Slice::Columns(1..3).cut(&f);
        assert_eq!(cut.to_vec::<f32>().unwrap(), vec![1., 2., 4., 5.]);
    }

    #[test]
    fn a_split_that_cannot_be_made_is_an_error() {
        let cfg = DecoderConfig::new(Arch::Llama, 1, 4 * 64, (4, 1), 256, 10);
        let err = cfg.shard(0, 3).unwrap_err().to_string();
        assert!(err.contains("cannot be split over 3 processes"), "{err}");
        assert!(cfg.shard(2, 2).is_err());
    }
}
