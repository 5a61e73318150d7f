//! Picking the next token from logits on the host: greedy, temperature,
//! top-k and top-p (nucleus) sampling with a seeded generator.
//!
//! This is host code over downloaded logits, used by the generation loops,
//! so it lives with them here rather than among the traced layers of
//! `radix::nn`.

use crate::{Error, Result};

/// A small seeded random generator (SplitMix64): the same seed gives the same
/// samples on every machine.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How to pick a token from a row of logits.
#[derive(Debug, Clone)]
pub enum Sampler {
    /// The largest logit (the first on ties).
    Greedy,
    /// A draw from `softmax(logits / temperature)`, restricted to the `top_k`
    /// largest (if set), then to the smallest set of those whose probability
    /// reaches `top_p` (if set).
    Sample {
        /// Divides the logits (> 0).
        temperature: f64,
        /// Keep only this many candidates.
        top_k: Option<usize>,
        /// Keep the most likely candidates up to this total probability.
        top_p: Option<f64>,
        /// Keep only candidates at least this fraction as likely as the
        /// most likely one.
        min_p: Option<f64>,
        /// The generator.
        rng: Rng,
    },
}

impl Sampler {
    /// Greedy decoding.
    pub fn greedy() -> Sampler {
        Sampler::Greedy
    }

    /// Sampling at `temperature` (positive and finite) among the `top_k`
    /// (at least 1) most likely tokens and those within `top_p` (in
    /// `(0, 1]`) of the probability, with a generator seeded by `seed`.
    /// Other values are an [`Error::Input`] naming them.
    pub fn sample(
        temperature: f64,
        top_k: Option<usize>,
        top_p: Option<f64>,
        seed: u64,
    ) -> Result<Self> {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(Error::Input(format!(
                "a sampling temperature must be positive and finite, got {temperature} \
                 (greedy decoding is Sampler::greedy)"
            )));
        }
        if top_k == Some(0) {
            return Err(Error::Input("top_k must be at least 1".into()));
        }
        if let Some(p) = top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
            return Err(Error::Input(format!("top_p must be in (0, 1], got {p}")));
        }
        Ok(Sampler::Sample {
            temperature,
            top_k,
            top_p,
            min_p: None,
            rng: Rng::new(seed),
        })
    }

    /// The same sampler keeping only the tokens at least `min_p` (in
    /// `[0, 1]`) as likely as the most likely one (after the temperature),
    /// as llama.cpp and vLLM's `min_p` do; greedy decoding is unchanged.
    pub fn with_min_p(self, min_p: Option<f64>) -> Result<Self> {
        if let Some(p) = min_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(Error::Input(format!("min_p must be in [0, 1], got {p}")));
        }
        Ok(match self {
            Sampler::Sample {
                temperature,
                top_k,
                top_p,
                rng,
                ..
            } => Sampler::Sample {
                temperature,
                top_k,
                top_p,
                min_p: min_p.filter(|&p| p > 0.0),
                rng,
            },
            greedy => greedy,
        })
    }

    /// The chosen index of `logits` (which must not be empty). A NaN logit
    /// is never chosen while any other is a number; when the most likely
    /// kept logit is infinite, the first such is chosen.
    pub fn pick(&mut self, logits: &[f32]) -> usize {
        match self {
            Sampler::Greedy => argmax(logits),
            Sampler::Sample {
                temperature,
                top_k,
                top_p,
                min_p,
                rng,
            } => {
                let key = |i: usize| f64::from(logits[i]).max(f64::NEG_INFINITY);
                let mut idx: Vec<usize> = (0..logits.len()).collect();
                idx.sort_by(|&a, &b| key(b).total_cmp(&key(a)).then(a.cmp(&b)));
                if let Some(k) = top_k {
                    idx.truncate((*k).max(1));
                }
                let top = key(idx[0]);
                if top.is_infinite() {
                    return idx[0];
                }
                let mut probs: Vec<f64> = idx
                    .iter()
                    .map(|&i| ((key(i) - top) / *temperature).exp())
                    .collect();
                let total: f64 = probs.iter().sum();
                probs.iter_mut().for_each(|p| *p /= total);
                if let Some(m) = min_p {
                    // Sorted: the most likely is first.
                    let floor = probs[0] * *m;
                    let keep = probs.iter().take_while(|&&q| q >= floor).count().max(1);
                    probs.truncate(keep);
                    idx.truncate(keep);
                }
                if let Some(p) = top_p {
                    let mut acc = 0.0;
                    let keep = probs
                        .iter()
                        .position(|&q| {
                            acc += q;
                            acc >= *p
                        })
                        .map_or(probs.len(), |i| i + 1);
                    probs.truncate(keep);
                    idx.truncate(keep);
                }
                let total: f64 = probs.iter().sum();
                let mut u = rng.next_f64() * total;
                for (k, &p) in probs.iter().enumerate() {
                    if u < p {
                        return idx[k];
                    }
                    u -= p;
                }
                idx[probs.len() - 1]
            }
        }
    }
}

/// The log-probability (log-softmax, in f64 then rounded) of token
/// `chosen` under `logits`, and the `k` most likely tokens with theirs,
/// most likely first (the lower id first on ties). NaN logits count as
/// impossible.
pub fn logprobs(logits: &[f32], chosen: usize, k: usize) -> (f32, Vec<(usize, f32)>) {
    let key = |x: f32| {
        if x.is_nan() {
            f64::NEG_INFINITY
        } else {
            f64::from(x)
        }
    };
    let max = logits
        .iter()
        .map(|&x| key(x))
        .fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = logits.iter().map(|&x| (key(x) - max).exp()).sum();
    let norm = max + sum.ln();
    let lp = |i: usize| (key(logits[i]) - norm) as f32;
    let mut top: Vec<usize> = (0..logits.len()).collect();
    let k = k.min(logits.len());
    if k > 0 && k < top.len() {
        top.select_nth_unstable_by(k - 1, |&a, &b| {
            key(logits[b]).total_cmp(&key(logits[a])).then(a.cmp(&b))
        });
    }
    top.truncate(k);
    top.sort_by(|&a, &b| key(logits[b]).total_cmp(&key(logits[a])).then(a.cmp(&b)));
    (lp(chosen), top.into_iter().map(|i| (i, lp(i))).collect())
}

/// The index of the largest value (the first on ties); NaNs lose to every
/// number (all NaN: 0).
pub(crate) fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] || (xs[best].is_nan() && !x.is_nan()) {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_first_max() {
        assert_eq!(Sampler::greedy().pick(&[1.0, 3.0, 3.0, -1.0]), 1);
    }

    #[test]
    fn nan_logits_are_never_picked() {
        let logits = [f32::NAN, 1.0, f32::NAN, 3.0, 2.0];
        assert_eq!(Sampler::greedy().pick(&logits), 3);
        let mut s = Sampler::sample(1.0, None, None, 5).unwrap();
        for _ in 0..100 {
            let i = s.pick(&logits);
            assert!(!logits[i].is_nan(), "picked NaN at {i}");
        }
        let mut s = Sampler::sample(0.7, Some(2), Some(0.9), 5).unwrap();
        assert_eq!(s.pick(&[f32::NAN, f32::INFINITY, 0.0]), 1);
    }

    #[test]
    fn bad_settings_are_errors() {
        for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = Sampler::sample(t, None, None, 1).unwrap_err().to_string();
            assert!(err.contains("temperature"), "{err}");
        }
        let err = Sampler::sample(1.0, Some(0), None, 1).unwrap_err();
        assert!(err.to_string().contains("top_k"), "{err}");
        for p in [0.0, 1.5, f64::NAN] {
            let err = Sampler::sample(1.0, None, Some(p), 1).unwrap_err();
            assert!(err.to_string().contains("top_p"), "{err}");
        }
    }

    #[test]
    fn top_k_one_is_greedy() {
        let mut s = Sampler::sample(1.0, Some(1), None, 7).unwrap();
        for _ in 0..10 {
            assert_eq!(s.pick(&[0.5, 2.0, 1.9]), 1);
        }
    }

    #[test]
    fn logprobs_are_the_log_softmax() {
        let logits = [1.0f32, 3.0, 2.0, f32::NAN];
        let (lp, top) = logprobs(&logits, 2, 2);
        let z = (1f64.exp() + 3f64.exp() + 2f64.exp()).ln();
        assert!((f64::from(lp) - (2.0 - z)).abs() < 1e-6);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2]);
        assert!((f64::from(top[0].1) - (3.0 - z)).abs() < 1e-6);
        assert_eq!(logprobs(&logits, 3, 0).0, f32::NEG_INFINITY);
    }

    #[test]
    fn min_p_drops_the_unlikely() {
        // Probabilities ~ [0.665, 0.245, 0.090]: min_p 0.2 keeps two
        // (0.090 < 0.2 * 0.665), min_p 0.1 all three.
        let logits = [2.0, 1.0, 0.0];
        let picks = |m| {
            let mut s = Sampler::sample(1.0, None, None, 1)
                .unwrap()
                .with_min_p(Some(m))
                .unwrap();
            (0..300).map(|_| s.pick(&logits)).collect::<Vec<_>>()
        };
        assert!(!picks(0.2).contains(&2));
        assert!(picks(0.1).contains(&2));
        let err = Sampler::greedy().with_min_p(Some(1.5)).unwrap_err();
        assert!(err.to_string().contains("min_p"), "{err}");
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        // Probabilities ~ [0.665, 0.245, 0.090]: top_p 0.8 keeps two.
        let mut s = Sampler::sample(1.0, None, Some(0.8), 1).unwrap();
        let logits = [2.0, 1.0, 0.0];
        let picks: Vec<usize> = (0..200).map(|_| s.pick(&logits)).collect();
        assert!(!picks.contains(&2));
        assert!(picks.contains(&0) && picks.contains(&1));
    }

    #[test]
    fn seeded_is_reproducible_and_follows_temperature() {
        let logits = [0.0f32, 1.0, 2.0, 3.0];
        let draw = |seed| {
            let mut s = Sampler::sample(1.0, None, None, seed).unwrap();
            (0..50).map(|_| s.pick(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        let mut cold = Sampler::sample(1e-3, None, None, 3).unwrap();
        assert!((0..50).all(|_| cold.pick(&logits) == 3));
    }
}
