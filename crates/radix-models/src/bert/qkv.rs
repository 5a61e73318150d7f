//! A layer's query, key and value projections as one stacked matrix.
//!
//! A checkpoint stores `attention.self.{query,key,value}.{weight,bias}`
//! apart; [`BertAttention`](super::BertAttention) multiplies by the three at
//! once, so [`StackedQkv`] serves `attention.self.qkv.weight` (`[3d, d]`,
//! the query's rows, then the key's, then the value's) and
//! `attention.self.qkv.bias` (`[3d]`) made of them. Each output of the
//! stacked product is the dot product of the same row as before, so the
//! results are those of the three products.

use std::path::Path;

use radix::io::{HostTensor, Result as IoResult, Safetensors, TensorSource, WeightStore};

use crate::Result;

/// The parts of a stacked tensor, in the order its rows take them.
const PARTS: [&str; 3] = ["query", "key", "value"];

/// What a stacked tensor's name has where its parts' have `self.query`.
const STACKED: &str = "self.qkv";

/// The store [`Bert`](super::Bert)'s weights load from: the checkpoint at
/// `path` (`model.safetensors`) with its projections stacked
/// ([`StackedQkv`]).
pub fn weight_store(path: &Path) -> Result<WeightStore> {
    let file = Safetensors::open(path)?;
    Ok(WeightStore::new(
        vec![Box::new(StackedQkv::new(Box::new(file)))],
        str::to_string,
    ))
}

/// A source that adds to `inner`'s tensors each layer's stacked
/// projections (`...attention.self.qkv.weight` and `.bias`), made of its
/// `...attention.self.{query,key,value}` tensors when they have one shape;
/// a 16-bit checkpoint's are widened to f32.
pub struct StackedQkv {
    inner: Box<dyn TensorSource>,
}

impl StackedQkv {
    /// `inner`'s tensors and the stacked ones.
    pub fn new(inner: Box<dyn TensorSource>) -> StackedQkv {
        StackedQkv { inner }
    }

    /// The names of the parts of stacked tensor `name`, if it is one.
    fn parts(name: &str) -> Option<[String; 3]> {
        let (layer, field) = name.split_once(&format!("attention.{STACKED}."))?;
        Some(PARTS.map(|p| format!("{layer}attention.self.{p}.{field}")))
    }

    /// The dims of stacked tensor `parts` if they all have one shape.
    fn stacked_dims(&self, parts: &[String; 3]) -> Option<Vec<i64>> {
        let dims = self.inner.dims(&parts[0])?;
        let same = parts[1..]
            .iter()
            .all(|p| self.inner.dims(p).as_ref() == Some(&dims));
        let mut res = dims;
        let rows = res.first_mut()?;
        *rows *= 3;
        same.then_some(res)
    }
}

impl TensorSource for StackedQkv {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn names(&self) -> Vec<String> {
        let mut names = self.inner.names();
        let stacked: Vec<String> = names
            .iter()
            .filter_map(|n| n.split_once(&format!("attention.self.{}.", PARTS[0])))
            .map(|(layer, field)| format!("{layer}attention.{STACKED}.{field}"))
            .filter(|n| Self::parts(n).is_some_and(|p| self.stacked_dims(&p).is_some()))
            .collect();
        names.extend(stacked);
        names.sort();
        names
    }

    fn dims(&self, name: &str) -> Option<Vec<i64>> {
        match Self::parts(name) {
            Some(parts) => self.stacked_dims(&parts),
            None => self.inner.dims(name),
        }
    }

    fn tensor(&self, name: &str) -> IoResult<Option<HostTensor>> {
        let Some(parts) = Self::parts(name) else {
            return self.inner.tensor(name);
        };
        let Some(dims) = self.stacked_dims(&parts) else {
            return Ok(None);
        };
        let mut values = Vec::with_capacity(dims.iter().product::<i64>() as usize);
        for p in &parts {
            match self.inner.tensor(p)? {
                Some(t) => values.extend(t.to_f32_vec()),
                None => return Ok(None),
            }
        }
        Ok(Some(HostTensor::from_slice(&dims, &values)))
    }
}
