//! What shapes the choice of each token of one sequence before the
//! [`Sampler`] draws: a bias per token (OpenAI's `logit_bias`), penalties
//! for tokens already seen (`presence_penalty`, `frequency_penalty` over
//! the reply, as OpenAI and vLLM define them; `repetition_penalty` over the
//! prompt and the reply, as transformers and vLLM do), and a grammar's mask
//! ([`Constraint`]). The mask applies to every sampler, greedy included.

use std::collections::HashMap;

use crate::constraint::Constraint;
use crate::sampling::Sampler;
use crate::{Error, Result};

/// Penalties for tokens already seen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Penalties {
    /// Subtracted once from the logit of every token the reply holds.
    pub presence: f32,
    /// Subtracted from a token's logit once per time the reply holds it.
    pub frequency: f32,
    /// Divides a positive logit (multiplies a negative one) of every token
    /// of the prompt or the reply; 1 changes nothing.
    pub repetition: f32,
}

impl Default for Penalties {
    fn default() -> Self {
        Penalties {
            presence: 0.0,
            frequency: 0.0,
            repetition: 1.0,
        }
    }
}

impl Penalties {
    /// Checks the values: presence and frequency in `[-2, 2]` (OpenAI's
    /// range), repetition positive and finite. An [`Error::Input`] names
    /// the one out of range.
    pub fn checked(self) -> Result<Penalties> {
        for (name, v) in [
            ("presence_penalty", self.presence),
            ("frequency_penalty", self.frequency),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(Error::Input(format!("{name} must be in [-2, 2], got {v}")));
            }
        }
        if !(self.repetition.is_finite() && self.repetition > 0.0) {
            return Err(Error::Input(format!(
                "repetition_penalty must be positive, got {}",
                self.repetition
            )));
        }
        Ok(self)
    }

    fn is_none(&self) -> bool {
        *self == Penalties::default()
    }
}

/// Picks the tokens of one sequence.
pub struct Picker {
    sampler: Sampler,
    penalties: Penalties,
    bias: Vec<(u32, f32)>,
    constraint: Option<Constraint>,
    /// How often each token occurs in the reply.
    counts: HashMap<u32, u32>,
    /// The prompt's distinct tokens (for the repetition penalty).
    prompt: Vec<u32>,
    scratch: Vec<f32>,
}

impl Picker {
    /// A picker drawing with `sampler` and nothing else.
    pub fn new(sampler: Sampler) -> Picker {
        Picker {
            sampler,
            penalties: Penalties::default(),
            bias: vec![],
            constraint: None,
            counts: HashMap::new(),
            prompt: vec![],
            scratch: vec![],
        }
    }

    /// With `penalties`, the prompt being `prompt`.
    pub fn with_penalties(mut self, penalties: Penalties, prompt: &[u32]) -> Picker {
        self.penalties = penalties;
        if penalties.repetition != 1.0 {
            let mut p = prompt.to_vec();
            p.sort_unstable();
            p.dedup();
            self.prompt = p;
        }
        self
    }

    /// With `bias` added to the logits of its tokens (ids past the logits
    /// are ignored).
    pub fn with_bias(mut self, bias: Vec<(u32, f32)>) -> Picker {
        self.bias = bias;
        self
    }

    /// With the output held to `constraint`'s grammar.
    pub fn with_constraint(mut self, constraint: Option<Constraint>) -> Picker {
        self.constraint = constraint;
        self
    }

    /// The next token after `logits` (the model's, unchanged), and records
    /// it; `None` when a grammar allows no token at all (the reply must end
    /// there).
    pub fn pick(&mut self, logits: &[f32]) -> Option<u32> {
        let plain = self.bias.is_empty() && self.penalties.is_none() && self.constraint.is_none();
        let next = if plain {
            self.sampler.pick(logits) as u32
        } else {
            let mut l = std::mem::take(&mut self.scratch);
            l.clear();
            l.extend_from_slice(logits);
            self.shape(&mut l);
            let allowed = self.constraint.as_mut().is_none_or(|c| c.mask(&mut l));
            let next = allowed.then(|| self.sampler.pick(&l) as u32);
            self.scratch = l;
            next?
        };
        *self.counts.entry(next).or_default() += 1;
        if let Some(c) = &mut self.constraint {
            c.commit(next);
        }
        Some(next)
    }

    /// Adds the bias and the penalties to `logits`.
    fn shape(&self, logits: &mut [f32]) {
        for &(id, b) in &self.bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += b;
            }
        }
        let Penalties {
            presence,
            frequency,
            repetition,
        } = self.penalties;
        if repetition != 1.0 {
            let seen = self.prompt.iter().chain(
                self.counts
                    .keys()
                    .filter(|t| self.prompt.binary_search(t).is_err()),
            );
            for &id in seen {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = if *l > 0.0 {
                        *l / repetition
                    } else {
                        *l * repetition
                    };
                }
            }
        }
        if presence != 0.0 || frequency != 0.0 {
            for (&id, &n) in &self.counts {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l -= presence + frequency * n as f32;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn greedy() -> Picker {
        Picker::new(Sampler::greedy())
    }

    #[test]
    fn presence_and_frequency_lower_what_the_reply_holds() {
        let logits = [1.0, 0.9, 0.5];
        // Without a penalty greedy repeats token 0.
        let mut p = greedy();
        assert_eq!([0; 3].map(|_| p.pick(&logits)), [Some(0); 3]);
        // Presence 0.2: after 0, token 1 (0.9 > 0.8); after both, 0 again
        // (0.8 > 0.7), and presence does not grow with the count.
        let pen = Penalties {
            presence: 0.2,
            ..Penalties::default()
        };
        let mut p = greedy().with_penalties(pen, &[]);
        let got = [0; 4].map(|_| p.pick(&logits).unwrap());
        assert_eq!(got, [0, 1, 0, 0]);
        // Frequency 0.3: each use lowers a token further.
        let pen = Penalties {
            frequency: 0.3,
            ..Penalties::default()
        };
        let mut p = greedy().with_penalties(pen, &[]);
        let got = [0; 4].map(|_| p.pick(&logits).unwrap());
        assert_eq!(got, [0, 1, 0, 1]);
    }

    #[test]
    fn repetition_divides_positive_and_multiplies_negative_logits() {
        let pen = Penalties {
            repetition: 2.0,
            ..Penalties::default()
        };
        // The prompt holds 0 and 2: 1.0 -> 0.5 < 0.6; -0.1 -> -0.2.
        let mut p = greedy().with_penalties(pen, &[0, 2]);
        assert_eq!(p.pick(&[1.0, 0.6, -0.1]), Some(1));
        let mut p = greedy().with_penalties(pen, &[2]);
        assert_eq!(p.pick(&[-0.15, -0.3, -0.1]), Some(0));
        assert!(
            Penalties {
                repetition: 0.0,
                ..pen
            }
            .checked()
            .unwrap_err()
            .to_string()
            .contains("repetition_penalty")
        );
        let bad = Penalties {
            presence: 2.5,
            ..Penalties::default()
        };
        assert!(
            bad.checked()
                .unwrap_err()
                .to_string()
                .contains("presence_penalty")
        );
    }

    #[test]
    fn bias_moves_the_choice() {
        let mut p = greedy().with_bias(vec![(2, 5.0), (99, 1.0)]);
        assert_eq!(p.pick(&[1.0, 0.0, -3.0]), Some(2));
        let mut p = greedy().with_bias(vec![(0, -100.0)]);
        assert_eq!(p.pick(&[1.0, 0.0, -3.0]), Some(1));
    }
}
