//! The prompt cache: the keys and values of prompts already run, kept on
//! the device so that a prompt starting with the same tokens (a system
//! prompt, a tool list, the earlier turns of a chat) runs only the tokens
//! after them, as llama.cpp's `cache_prompt` and mistral.rs's prefix cacher
//! do.
//!
//! An entry holds one sequence's caches cut to its *stored length*, the
//! power of two at or above its token count up to 256 and the multiple of
//! 256 above that (capped by the capacity), so that a cut and a paste
//! compile once per length, not per prompt, and a long prompt keeps less
//! than twice its positions; its
//! bytes count against a budget, and the least recently used entries go
//! first when a new one does not fit.
//!
//! *Invariant:* an entry's buffers are never given to a step: a hit is
//! pasted into new full-capacity buffers, which the step then writes in
//! place ([`PromptCache::lookup`]), or copied into a slot's row
//! ([`PromptCache::lookup_shared`], then `Engine::join`), so a hit never
//! spends the entry that served it. A [`Cache`] of the whole capacity is
//! therefore always its holder's own; only a shorter one may be an
//! entry's.

use std::collections::HashMap;

use radix::nn::KvCache;
use radix::{Bufferized, Compiled, DType, Platform, Shape, Tensor};

use crate::Result;
use crate::engine::Cache;

/// One sequence's caches, a layer each.
type Caches = Vec<KvCache>;

/// Prompts already run, by their tokens.
pub struct PromptCache {
    platform: Platform,
    /// One sequence's cache shapes at full capacity, a layer each.
    shapes: Vec<Shape>,
    capacity: usize,
    /// The most bytes the entries take together.
    budget: usize,
    /// Least recently used first.
    entries: Vec<Entry>,
    /// By stored length: the first positions of a full cache.
    cuts: HashMap<usize, Compiled<(), Caches, Caches>>,
    /// By stored length: a full cache holding an entry's positions.
    pastes: HashMap<usize, Compiled<(), Caches, Caches>>,
}

/// One prompt's keys and values.
struct Entry {
    tokens: Vec<u32>,
    buffers: Bufferized<Caches>,
    bytes: usize,
}

impl PromptCache {
    /// An empty prompt cache for sequences whose caches have `shapes` (a
    /// layer each, tagged `(b, k, h, hd)`, `b` = 1) holding at most
    /// `budget` bytes.
    pub fn new(platform: &Platform, shapes: Vec<Shape>, budget: usize) -> PromptCache {
        let capacity = shapes.first().and_then(|s| s.dim("k")).unwrap_or(0) as usize;
        PromptCache {
            platform: platform.clone(),
            shapes,
            capacity,
            budget,
            entries: vec![],
            cuts: HashMap::new(),
            pastes: HashMap::new(),
        }
    }

    /// How many prompts it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds no prompt.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bytes its entries take.
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    /// The positions an entry of `n` tokens keeps.
    fn stored_len(&self, n: usize) -> usize {
        let len = match n {
            ..=256 => n.next_power_of_two(),
            _ => n.next_multiple_of(256),
        };
        len.min(self.capacity)
    }

    /// The bytes `len` positions of every layer's keys and values take.
    fn bytes_of(&self, len: usize) -> usize {
        self.shapes
            .iter()
            .map(|s| 2 * s.byte_size() / self.capacity.max(1) * len)
            .sum()
    }

    /// A cache holding the longest run of `prompt`'s first tokens that an
    /// entry holds (its [`Cache::len`]), leaving at least the last token to
    /// run (its logits are the step's result): a full-capacity cache, the
    /// caller's own to extend. `None` when no entry shares a first token.
    pub fn lookup(&mut self, prompt: &[u32]) -> Result<Option<Cache>> {
        self.lookup_shared(prompt)?
            .map(|hit| self.own(hit))
            .transpose()
    }

    /// [`PromptCache::lookup`] without the copy: the entry's own buffers,
    /// its stored positions ([`Cache::positions`]), which nothing may
    /// write. [`Engine::join`](crate::engine::Engine::join) copies them
    /// into a slot (one copy where a lookup and a join made two); anything
    /// else wants [`PromptCache::own`]. An entry kept at the whole
    /// capacity is copied: a cache of that size is its holder's own, which
    /// a step may spend.
    pub fn lookup_shared(&mut self, prompt: &[u32]) -> Result<Option<Cache>> {
        let most = prompt.len().saturating_sub(1);
        let best = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, common_prefix(&e.tokens, prompt).min(most)))
            .max_by_key(|&(i, n)| (n, i));
        let Some((i, n)) = best.filter(|&(_, n)| n > 0) else {
            return Ok(None);
        };
        // Most recently used last.
        let entry = self.entries.remove(i);
        let hit = Cache::new(entry.buffers.clone(), n);
        self.entries.push(entry);
        match hit.positions() == self.capacity {
            true => self.copy(hit).map(Some),
            false => Ok(Some(hit)),
        }
    }

    /// A full-capacity cache of the caller's own holding what `cache`
    /// holds: `cache` itself when it is one, else (an entry's, from
    /// [`PromptCache::lookup_shared`]) a copy.
    pub fn own(&mut self, cache: Cache) -> Result<Cache> {
        match cache.positions() == self.capacity {
            true => Ok(cache),
            false => self.copy(cache),
        }
    }

    /// A full-capacity cache of new buffers holding what `cache` (of any
    /// stored length) holds.
    fn copy(&mut self, cache: Cache) -> Result<Cache> {
        let len = cache.len();
        let pasted = self.paste(cache.positions())?.call_fn(cache.buffers)?;
        Ok(Cache::new(pasted, len))
    }

    /// Keeps a copy of the first `tokens.len()` positions of `cache` (which
    /// holds `tokens`), unless an entry already holds `tokens` or more;
    /// entries holding a beginning of `tokens` make way for it, and the
    /// least recently used ones for its bytes. A prompt too large for the
    /// whole budget is not kept.
    pub fn store(&mut self, tokens: &[u32], cache: &Cache) -> Result<()> {
        self.store_with(tokens, || {
            Ok(Cache::new(cache.buffers.clone(), cache.len()))
        })
    }

    /// [`PromptCache::store`] of the cache `cache()` makes, made only if
    /// the entry is new (a batch's row is copied out to be kept).
    pub fn store_with(
        &mut self,
        tokens: &[u32],
        cache: impl FnOnce() -> Result<Cache>,
    ) -> Result<()> {
        if tokens.is_empty() {
            return Ok(());
        }
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.tokens.starts_with(tokens))
        {
            let entry = self.entries.remove(i);
            self.entries.push(entry);
            return Ok(());
        }
        let len = self.stored_len(tokens.len());
        let bytes = self.bytes_of(len);
        if bytes > self.budget {
            return Ok(());
        }
        let cache = cache()?;
        if tokens.len() > cache.len() {
            return Ok(());
        }
        self.entries.retain(|e| !tokens.starts_with(&e.tokens));
        while self.bytes() + bytes > self.budget {
            self.entries.remove(0);
        }
        let buffers = self.cut(len)?.call_fn(cache.buffers.clone())?;
        self.entries.push(Entry {
            tokens: tokens.to_vec(),
            buffers,
            bytes,
        });
        Ok(())
    }

    /// The program keeping the first `len` positions of a full cache.
    fn cut(&mut self, len: usize) -> Result<&Compiled<(), Caches, Caches>> {
        if !self.cuts.contains_key(&len) {
            let full = params(&self.shapes);
            let exe = radix::compile_fn(&self.platform, &full, |full| {
                full.iter()
                    .map(|c| KvCache {
                        k: c.k.slice("k", 0..len as i64),
                        v: c.v.slice("k", 0..len as i64),
                    })
                    .collect::<Caches>()
            })?;
            self.cuts.insert(len, exe);
        }
        Ok(&self.cuts[&len])
    }

    /// The program making a full cache from an entry of `len` positions.
    fn paste(&mut self, len: usize) -> Result<&Compiled<(), Caches, Caches>> {
        if !self.pastes.contains_key(&len) {
            let cut: Vec<Shape> = self.shapes.iter().map(|&s| with_len(s, len)).collect();
            let shapes = self.shapes.clone();
            let exe = radix::compile_fn(&self.platform, &params(&cut), |cut| {
                let zero = Tensor::scalar(0.0, DType::I32);
                cut.iter()
                    .zip(&shapes)
                    .map(|(&c, &full)| KvCache::zeros(full).paste(zero, c))
                    .collect::<Caches>()
            })?;
            self.pastes.insert(len, exe);
        }
        Ok(&self.pastes[&len])
    }
}

/// Placeholders of caches of `shapes`.
fn params(shapes: &[Shape]) -> Caches {
    shapes.iter().map(|&s| KvCache::param(s)).collect()
}

/// A cache shape ([`KvCache::shape`]) holding `len` positions.
fn with_len(shape: Shape, len: usize) -> Shape {
    resized(shape, "k", len)
}

/// A cache shape ([`KvCache::shape`]) with `n` along its axis `tag` (`b`
/// or `k`), its other axes, their tags (a Q8_0 cache's blocks axis among
/// them) and its element type kept.
pub(crate) fn resized(shape: Shape, tag: &str, n: usize) -> Shape {
    let at = shape.axis(tag).expect("a cache shape has b and k axes");
    (shape.remove_axis(at))
        .and_then(|s| s.insert_axis(at, n as i64, tag))
        .expect("an axis removed is put back")
}

/// How many first elements `a` and `b` share.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn common_prefixes() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4]), 2);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[5], &[1]), 0);
    }
}
