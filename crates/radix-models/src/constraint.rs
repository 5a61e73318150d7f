//! Structured output: a grammar (a JSON schema, any JSON object, or a Lark
//! grammar as llguidance reads it) that the generated text must follow,
//! enforced while sampling by masking every token the grammar does not
//! allow next. The masks come from the `llguidance` crate over a
//! [`toktrie::TokTrie`] of the model's own vocabulary: each token's bytes as
//! the tokenizer decodes them.
//!
//! A [`Vocabulary`] is built once per tokenizer (the trie, and llguidance's
//! shared tables when the first grammar needs them); each request compiles its [`Grammar`] into a
//! [`Constraint`], which follows the tokens as they are picked.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use radix_text::Tokenizer;
use serde_json::Value;
use tokenizers::DecoderWrapper;
use toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::{Error, Result};

/// What the output must follow.
#[derive(Debug, Clone)]
pub enum Grammar {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON value valid against this JSON schema.
    JsonSchema(Value),
    /// A grammar in llguidance's Lark syntax (`start: ...`), or in GBNF
    /// (`root ::= ...`, llama.cpp's `grammar`), translated to Lark first.
    Grammar(String),
}

/// A tokenizer's vocabulary as llguidance reads it, and the tables its
/// grammars share. Cheap to clone.
#[derive(Clone)]
pub struct Vocabulary {
    /// Made by the first grammar compiled: llguidance's shared tables take
    /// ~20 MB for SmolLM2's vocabulary, which a server whose clients never
    /// ask for structured output should not hold. An error to make it is
    /// kept and given to every grammar.
    factory: Arc<OnceLock<std::result::Result<ParserFactory, String>>>,
    env: TokEnv,
}

impl Vocabulary {
    /// The vocabulary of `tokenizer` with `n_vocab` entries (the model's
    /// logits; ids past the tokenizer's are never allowed), generation
    /// ending at any of `stops`.
    pub fn new(tokenizer: &Tokenizer, n_vocab: usize, stops: &[u32]) -> Result<Vocabulary> {
        let words = token_bytes(tokenizer, n_vocab)?;
        let eos = stops.first().copied().or(tokenizer.eos_id()).unwrap_or(0);
        let info = TokRxInfo::new(words.len() as u32, eos);
        let mut trie = TokTrie::from(&info, &words);
        if stops.len() > 1 {
            trie = trie.with_eos_tokens(stops);
        }
        let env: TokEnv = Arc::new(Env {
            trie,
            tokenizer: tokenizer.clone(),
        });
        Ok(Vocabulary {
            factory: Arc::default(),
            env,
        })
    }

    /// llguidance's tables over this vocabulary, made on first use.
    fn factory(&self) -> Result<&ParserFactory> {
        self.factory
            .get_or_init(|| {
                let mut factory = ParserFactory::new_simple(&self.env)
                    .map_err(|e| format!("cannot prepare the vocabulary for grammars: {e}"))?;
                factory.quiet();
                Ok(factory)
            })
            .as_ref()
            .map_err(|e| Error::Input(e.clone()))
    }

    /// The bytes token `id` stands for (empty for an id past the
    /// vocabulary; a special token's name, such as `<|im_end|>`).
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let trie = self.env.tok_trie();
        if id as usize >= trie.vocab_size() {
            return vec![];
        }
        let bytes = trie.token(id);
        match bytes.split_first() {
            Some((&TokTrie::SPECIAL_TOKEN_MARKER, name)) => name.to_vec(),
            _ => bytes.to_vec(),
        }
    }

    /// `grammar` compiled for this vocabulary: an [`Error::Input`] saying
    /// what is wrong with it if it does not compile.
    pub fn constraint(&self, grammar: &Grammar) -> Result<Constraint> {
        let top = match grammar {
            Grammar::JsonObject => {
                TopLevelGrammar::from_json_schema(compact(serde_json::json!({"type": "object"})))
            }
            Grammar::JsonSchema(schema) => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(Error::Input(
                        "a JSON schema must be an object (or true/false)".into(),
                    ));
                }
                TopLevelGrammar::from_json_schema(compact(schema.clone()))
            }
            Grammar::Grammar(text) => {
                let lark = if crate::gbnf::is_gbnf(text) {
                    crate::gbnf::to_lark(text).map_err(Error::Input)?
                } else {
                    text.clone()
                };
                if lark.trim().is_empty() {
                    return Err(Error::Input("the grammar is empty".into()));
                }
                TopLevelGrammar::from_lark(lark)
            }
        };
        // llguidance turns a panic while compiling into an error itself;
        // this keeps any that escapes from reaching the caller's thread.
        let factory = self.factory()?;
        let parser =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| factory.create_parser(top)))
                .map_err(|_| Error::Input("the grammar could not be compiled".into()))?
                .map_err(|e| Error::Input(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(Error::Input(e));
        }
        Ok(Constraint {
            matcher,
            done: false,
        })
    }
}

/// A schema with llguidance's compact JSON (no free whitespace between
/// tokens) unless it says otherwise: with free whitespace a small model
/// can spend its whole reply on blank lines.
fn compact(mut schema: Value) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance")
            .or_insert_with(|| serde_json::json!({"whitespace_flexible": false}));
    }
    schema
}

/// A grammar following one generated sequence. A clone follows its own.
pub struct Constraint {
    matcher: Matcher,
    /// The grammar allows nothing more (not even an end token).
    done: bool,
}

impl Clone for Constraint {
    fn clone(&self) -> Self {
        Constraint {
            matcher: self.matcher.deep_clone(),
            done: self.done,
        }
    }
}

impl Constraint {
    /// Sets every logit the grammar does not allow next to minus infinity
    /// (once the grammar is complete only the end tokens are allowed):
    /// whether any token is left. `false` means the reply must end here.
    pub fn mask(&mut self, logits: &mut [f32]) -> bool {
        if self.done {
            return false;
        }
        let allowed = match self.matcher.compute_mask_or_eos() {
            Ok(allowed) => allowed,
            Err(e) => {
                tracing::warn!("the grammar stopped: {e}");
                self.done = true;
                return false;
            }
        };
        let any = apply(&allowed, logits);
        self.done = !any;
        any
    }

    /// Follows the grammar with the picked `token`. A token the grammar
    /// does not allow ends it (the next [`Constraint::mask`] allows none).
    pub fn commit(&mut self, token: u32) {
        if self.done || self.matcher.is_stopped() {
            return;
        }
        if let Err(e) = self.matcher.consume_token(token) {
            tracing::warn!("the grammar refused token {token}: {e}");
            self.done = true;
        }
    }
}

/// Masks `logits` by `allowed`: whether any allowed logit is not NaN.
fn apply(allowed: &SimpleVob, logits: &mut [f32]) -> bool {
    let mut any = false;
    for (i, l) in logits.iter_mut().enumerate() {
        if i < allowed.len() && allowed.is_allowed(i as TokenId) {
            any |= !l.is_nan();
        } else {
            *l = f32::NEG_INFINITY;
        }
    }
    any
}

/// The tokenizer as llguidance's environment: the trie, and the tokenizer
/// for text it must tokenize (forced text, healing).
struct Env {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |s| {
            self.tokenizer
                .encode_without_added_tokens(s)
                .unwrap_or_default()
        })
    }
}

/// How a tokenizer's token strings map to bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pieces {
    /// GPT-2's byte-level alphabet: each byte one printable character.
    ByteLevel,
    /// SentencePiece: `▁` for a space, `<0xNN>` for a raw byte.
    ByteFallback,
}

/// The bytes of every token of `tokenizer`, `n_vocab` of them (ids it does
/// not have are special placeholders that no text matches); special tokens
/// carry toktrie's marker before their name.
fn token_bytes(tokenizer: &Tokenizer, n_vocab: usize) -> Result<Vec<Vec<u8>>> {
    let inner = tokenizer.inner();
    let pieces = match inner.get_decoder().and_then(pieces_of) {
        Some(p) => p,
        None => {
            return Err(Error::Input(
                "grammars need a byte-level or byte-fallback tokenizer; this one is neither".into(),
            ));
        }
    };
    let specials = inner.get_added_tokens_decoder();
    let chars = byte_level_chars();
    let n = n_vocab.max(inner.get_vocab_size(true));
    let mut words = Vec::with_capacity(n);
    for id in 0..n as u32 {
        let placeholder = || {
            let mut w = format!(".<[{id}]>").into_bytes();
            w[0] = TokTrie::SPECIAL_TOKEN_MARKER;
            w
        };
        let Some(name) = inner.id_to_token(id) else {
            words.push(placeholder());
            continue;
        };
        let word = match specials.get(&id) {
            Some(t) if t.special => {
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend_from_slice(name.as_bytes());
                w
            }
            // Added tokens that are not special match their text as is.
            Some(t) => t.content.as_bytes().to_vec(),
            None => match pieces {
                Pieces::ByteLevel => name
                    .chars()
                    .map(|c| chars.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_else(placeholder),
                Pieces::ByteFallback => match byte_token(&name) {
                    Some(b) => vec![b],
                    None => name.replace('\u{2581}', " ").into_bytes(),
                },
            },
        };
        words.push(word);
    }
    Ok(words)
}

/// The piece form of a decoder (the first that says).
fn pieces_of(d: &DecoderWrapper) -> Option<Pieces> {
    match d {
        DecoderWrapper::ByteLevel(_) => Some(Pieces::ByteLevel),
        DecoderWrapper::ByteFallback(_) => Some(Pieces::ByteFallback),
        DecoderWrapper::Sequence(seq) => seq.get_decoders().iter().find_map(pieces_of),
        _ => None,
    }
}

/// The byte of a `<0xNN>` token.
fn byte_token(name: &str) -> Option<u8> {
    let hex = name.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok())?
}

/// GPT-2's byte-level alphabet, character to byte: printable bytes stand
/// for themselves, the others for characters from U+0100 on.
fn byte_level_chars() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut next = 0x100u32;
    (0..=255u8)
        .map(|b| {
            if printable(b) {
                (b as char, b)
            } else {
                let c = char::from_u32(next).expect("below U+0200");
                next += 1;
                (c, b)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_alphabet_covers_every_byte() {
        let chars = byte_level_chars();
        assert_eq!(chars.len(), 256);
        assert_eq!(chars[&'\u{120}'], b' ');
        assert_eq!(chars[&'a'], b'a');
        assert_eq!(chars[&'\u{10a}'], b'\n');
        assert_eq!(byte_token("<0x0A>"), Some(b'\n'));
        assert_eq!(byte_token("<0x0>"), None);
    }
}
