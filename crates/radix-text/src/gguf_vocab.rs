//! The vocabulary embedded in a GGUF file, built as a `tokenizers` tokenizer
//! the way transformers builds it (`integrations/gguf/gguf_tokenizer_mapping.py`),
//! so that the ids equal those of `AutoTokenizer.from_pretrained(.., gguf_file=..)`.
//!
//! `tokenizer.ggml.model` names the kind:
//! - `gpt2`: byte-level BPE (`GPT2Tokenizer`): the file's merges, text split
//!   by the regex `tokenizer.ggml.pre` names (GPT-2's for names transformers
//!   does not know), a ByteLevel pre-tokenizer (no prefix space) and decoder.
//! - `llama`: SentencePiece (`LlamaTokenizer`; `GemmaTokenizer` for the gemma
//!   architectures, Phi-3's normalizer for `phi3`): a BPE with byte fallback
//!   whose merges are recovered from the vocabulary and its scores, and `▁` for
//!   spaces.
//!
//! Control tokens (token type 3) become special added tokens, user-defined ones
//! (type 4) plain added tokens, so that text naming them is not cut into pieces.

use std::collections::HashMap;
use std::path::Path;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, DecoderWrapper, SplitDelimiterBehavior};

use radix_io::Gguf;
use radix_io::gguf::GgufValue;

use crate::{Error, Result};

/// The kinds of `tokenizer.ggml.model` radix builds, as named in error messages.
const KNOWN_KINDS: &str = "\"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece)";

/// Tokens that end a turn when the vocabulary holds them as control tokens
/// (Gemma, ChatML, Llama 3, Phi-3), besides the end-of-sequence token.
pub(crate) const TURN_ENDS: [&str; 4] = ["<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>"];

/// GGUF token types (llama.cpp's `llama_token_type`).
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// SentencePiece's spelling of a space.
const SPACE: char = '\u{2581}';

/// A GGUF vocabulary as a `tokenizers` tokenizer, with its special ids.
pub(crate) struct GgufVocab {
    pub inner: tokenizers::Tokenizer,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

/// Builds the tokenizer `gguf` describes.
pub(crate) fn build(gguf: &Gguf) -> Result<GgufVocab> {
    let meta = Metadata::read(gguf)?;
    let mut inner = match meta.kind {
        "gpt2" => byte_level(&meta)?,
        "llama" => match meta.architecture {
            Some("gemma" | "gemma2" | "gemma3") => gemma(&meta)?,
            Some("phi3") => phi3(&meta)?,
            _ => sentencepiece(&meta)?,
        },
        other => {
            return Err(meta.bad(format!(
                "`tokenizer.ggml.model` is {other:?}, a kind radix cannot build; it knows {KNOWN_KINDS}"
            )));
        }
    };
    let bos = meta.id("tokenizer.ggml.bos_token_id");
    let eos = meta.id("tokenizer.ggml.eos_token_id");
    // llama.cpp adds BOS to a SentencePiece vocabulary that does not say
    // otherwise (older files have no flag), and transformers follows it.
    let add_bos = meta.flag("tokenizer.ggml.add_bos_token", meta.kind == "llama");
    let add_eos = meta.flag("tokenizer.ggml.add_eos_token", false);
    let bos_added = bos.filter(|_| add_bos);
    let eos_added = eos.filter(|_| add_eos);
    if bos_added.is_some() || eos_added.is_some() {
        inner.with_post_processor(Some(post_processor(&meta, bos_added, eos_added)?));
    }
    add_special_tokens(&mut inner, &meta);
    Ok(GgufVocab { inner, bos, eos })
}

/// The ids that end a turn in `gguf`'s vocabulary: the end-of-sequence token and
/// those of [`TURN_ENDS`] the file marks as control tokens. Reads only the
/// metadata, without building the tokenizer.
pub fn turn_end_ids(gguf: &Gguf) -> Vec<u32> {
    let mut ids: Vec<u32> = gguf
        .get("tokenizer.ggml.eos_token_id")
        .and_then(GgufValue::as_i64)
        .and_then(|i| u32::try_from(i).ok())
        .into_iter()
        .collect();
    let tokens = gguf
        .get("tokenizer.ggml.tokens")
        .and_then(GgufValue::as_array)
        .unwrap_or_default();
    let types = gguf
        .get("tokenizer.ggml.token_type")
        .and_then(GgufValue::as_array)
        .unwrap_or_default();
    for (i, (token, ty)) in tokens.iter().zip(types).enumerate() {
        if ty.as_i64() == Some(CONTROL)
            && token.as_str().is_some_and(|t| TURN_ENDS.contains(&t))
            && !ids.contains(&(i as u32))
        {
            ids.push(i as u32);
        }
    }
    ids
}

/// The tokenizer metadata of a GGUF file.
struct Metadata<'a> {
    gguf: &'a Gguf,
    path: &'a Path,
    kind: &'a str,
    architecture: Option<&'a str>,
    tokens: Vec<&'a str>,
    /// The token type of each token (1, normal, where the file has none).
    types: Vec<i64>,
}

impl<'a> Metadata<'a> {
    fn read(gguf: &'a Gguf) -> Result<Self> {
        let path = gguf.path();
        let bad = |reason: String| Error::Tokenizer {
            path: path.to_path_buf(),
            reason,
        };
        let kind = match gguf.get("tokenizer.ggml.model") {
            Some(v) => v
                .as_str()
                .ok_or_else(|| bad("`tokenizer.ggml.model` is not a string".into()))?,
            None => {
                return Err(bad(format!(
                    "no `tokenizer.ggml.model` key: the file has no vocabulary radix can build \
                     (it knows {KNOWN_KINDS})"
                )));
            }
        };
        let architecture = gguf.get("general.architecture").and_then(GgufValue::as_str);
        let mut meta = Metadata {
            gguf,
            path,
            kind,
            architecture,
            tokens: vec![],
            types: vec![],
        };
        if !matches!(kind, "gpt2" | "llama") {
            return Ok(meta);
        }
        meta.tokens = meta.strings("tokenizer.ggml.tokens")?;
        meta.types = match gguf
            .get("tokenizer.ggml.token_type")
            .and_then(GgufValue::as_array)
        {
            Some(arr) if arr.len() == meta.tokens.len() => {
                arr.iter().map(|v| v.as_i64().unwrap_or(1)).collect()
            }
            Some(arr) => {
                return Err(meta.bad(format!(
                    "`tokenizer.ggml.token_type` has {} entries for {} tokens",
                    arr.len(),
                    meta.tokens.len()
                )));
            }
            None => vec![1; meta.tokens.len()],
        };
        Ok(meta)
    }

    fn bad(&self, reason: String) -> Error {
        Error::Tokenizer {
            path: self.path.to_path_buf(),
            reason,
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<&'a str>> {
        let arr = self
            .gguf
            .get(key)
            .and_then(GgufValue::as_array)
            .ok_or_else(|| self.bad(format!("no `{key}` array")))?;
        arr.iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| self.bad(format!("`{key}` holds a non-string")))
            })
            .collect()
    }

    fn id(&self, key: &str) -> Option<u32> {
        self.gguf
            .get(key)
            .and_then(GgufValue::as_i64)
            .and_then(|i| u32::try_from(i).ok())
    }

    fn flag(&self, key: &str, default: bool) -> bool {
        self.gguf
            .get(key)
            .and_then(GgufValue::as_bool)
            .unwrap_or(default)
    }

    /// The file's merges, `a b` each.
    fn merges(&self) -> Result<Vec<(String, String)>> {
        self.strings("tokenizer.ggml.merges")?
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| self.bad("a merge in `tokenizer.ggml.merges` is not two tokens".into()))
    }

    /// The file's scores, one per token.
    fn scores(&self) -> Result<Vec<f64>> {
        let key = "tokenizer.ggml.scores";
        let arr = self
            .gguf
            .get(key)
            .and_then(GgufValue::as_array)
            .ok_or_else(|| {
                self.bad(format!(
                    "no `{key}` array (a SentencePiece vocabulary needs it)"
                ))
            })?;
        if arr.len() != self.tokens.len() {
            return Err(self.bad(format!(
                "`{key}` has {} entries for {} tokens",
                arr.len(),
                self.tokens.len()
            )));
        }
        // A NaN has no place in the order merges are sorted by (sorting by
        // it would panic).
        arr.iter()
            .enumerate()
            .map(|(i, v)| match v.as_f64() {
                Some(x) if !x.is_nan() => Ok(x),
                Some(_) => Err(self.bad(format!("`{key}[{i}]` is NaN"))),
                None => Err(self.bad(format!("`{key}` holds a non-number"))),
            })
            .collect()
    }
}

/// Byte-level BPE (`GPT2Tokenizer`): text split by the regex of the file's
/// pre-tokenizer (`tokenizer.ggml.pre`, as transformers' `set_split_regex`
/// knows them: Llama 3's, Qwen's, ...), else GPT-2's, then spelled in GPT-2's
/// byte alphabet. A token the file spells outside that alphabet is respelled
/// from its UTF-8 bytes, as transformers does.
fn byte_level(meta: &Metadata) -> Result<tokenizers::Tokenizer> {
    let alphabet = byte_alphabet();
    let tokens: Vec<String> = meta
        .tokens
        .iter()
        .map(|t| {
            if t.chars().all(|c| alphabet.contains(&c)) {
                t.to_string()
            } else {
                t.bytes().map(|b| alphabet[b as usize]).collect()
            }
        })
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab(&tokens), meta.merges()?)
        .build()
        .map_err(|e| meta.bad(format!("building the BPE model: {e}")))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    let pre = meta
        .gguf
        .get("tokenizer.ggml.pre")
        .and_then(GgufValue::as_str);
    match pre.and_then(split_regex) {
        Some(regex) => {
            let split = Split::new(
                SplitPattern::Regex(regex.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| meta.bad(format!("the pre-tokenizer regex of {pre:?}: {e}")))?;
            inner.with_pre_tokenizer(Some(PreTokenizerSequence::new(vec![
                split.into(),
                ByteLevel::new(false, true, false).into(),
            ])));
        }
        None => {
            inner.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        }
    }
    inner.with_decoder(Some(ByteLevel::default()));
    Ok(inner)
}

/// The regex that splits text before byte-level BPE, by `tokenizer.ggml.pre`
/// (transformers' `GGUF_PRE_TOKENIZER_SPLITS`); `None`: GPT-2's.
fn split_regex(pre: &str) -> Option<&'static str> {
    const LLAMA3: &str = concat!(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}",
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    const QWEN2: &str = concat!(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}",
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    const QWEN35: &str = concat!(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}",
        r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    const TEKKEN: &str = concat!(
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
        r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    const GPT4O: &str = concat!(
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3,
        "tekken" => TEKKEN,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2,
        "qwen35" => QWEN35,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O,
        _ => return None,
    })
}

/// GPT-2's spelling of each byte (`bytes_to_unicode`): printable Latin-1
/// characters as themselves, the other bytes as U+0100 onwards, in order.
fn byte_alphabet() -> [char; 256] {
    let mut alphabet = ['\0'; 256];
    let mut next = 256u32;
    for (b, c) in alphabet.iter_mut().enumerate() {
        let printable = matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
        let code = if printable {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        *c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
    }
    alphabet
}

/// SentencePiece as `LlamaTokenizer` (Llama 2, Mistral, ...): no normalizer; a
/// Metaspace pre-tokenizer puts `▁` for spaces and, where the file asks for a
/// prefix space (`tokenizer.ggml.add_space_prefix`, true unless it says
/// otherwise), one before the text; the decoder takes that space off again.
fn sentencepiece(meta: &Metadata) -> Result<tokenizers::Tokenizer> {
    let tokens: Vec<String> = meta.tokens.iter().map(|t| t.to_string()).collect();
    let scores = meta.scores()?;
    let mut inner = tokenizers::Tokenizer::new(spm_bpe(meta, &tokens, &scores, None)?);
    // transformers ignores the flag and always prefixes; llama.cpp follows it.
    let prefix = meta.flag("tokenizer.ggml.add_space_prefix", true);
    let scheme = if prefix {
        PrependScheme::First
    } else {
        PrependScheme::Never
    };
    inner.with_pre_tokenizer(Some(Metaspace::new(SPACE, scheme, false)));
    inner.with_decoder(Some(spm_decoder(meta, prefix)?));
    Ok(inner)
}

/// SentencePiece as transformers builds Phi-3's: the prefix space and the `▁`s
/// come from a normalizer, not from Metaspace (`"  hi"` gives three `▁`).
fn phi3(meta: &Metadata) -> Result<tokenizers::Tokenizer> {
    let mut inner = sentencepiece(meta)?;
    let normalizer = NormalizerSequence::new(vec![
        Prepend::new(SPACE.to_string()).into(),
        Replace::new(" ", SPACE.to_string())
            .map_err(|e| meta.bad(e.to_string()))?
            .into(),
    ]);
    inner.with_normalizer(Some(normalizer));
    inner.with_pre_tokenizer(None::<Metaspace>);
    Ok(inner)
}

/// SentencePiece as `GemmaTokenizer`: a normalizer turns spaces into `▁`, no
/// prefix space. Two fixes the files need (transformers' `gemma_tokenizer`): a
/// token of blanks holding a space is stored with real spaces (`"  "`) but
/// looked up as `▁▁`, so it is respelled; and the merges follow the order of
/// the tokens in the file, not their scores.
fn gemma(meta: &Metadata) -> Result<tokenizers::Tokenizer> {
    let tokens: Vec<String> = meta
        .tokens
        .iter()
        .map(|t| {
            if t.contains(' ') && t.chars().all(py_isspace) {
                SPACE.to_string().repeat(t.chars().count())
            } else {
                t.to_string()
            }
        })
        .collect();
    let positions: Vec<f64> = (0..tokens.len()).map(|i| -(i as f64)).collect();
    let mut inner = tokenizers::Tokenizer::new(spm_bpe(meta, &tokens, &positions, Some("<unk>"))?);
    inner.with_normalizer(Some(
        Replace::new(" ", SPACE.to_string()).map_err(|e| meta.bad(e.to_string()))?,
    ));
    inner.with_pre_tokenizer(Some(
        Split::new(" ", SplitDelimiterBehavior::MergedWithPrevious, false)
            .map_err(|e| meta.bad(e.to_string()))?,
    ));
    inner.with_decoder(Some(spm_decoder(meta, false)?));
    Ok(inner)
}

/// A SentencePiece BPE with byte fallback over `tokens`, its merges recovered
/// from the vocabulary and `scores` (best first).
fn spm_bpe(meta: &Metadata, tokens: &[String], scores: &[f64], unk: Option<&str>) -> Result<BPE> {
    let merges = recover_merges(tokens, scores);
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab(tokens), merges)
        .fuse_unk(true)
        .byte_fallback(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(unk.to_string());
    }
    builder
        .build()
        .map_err(|e| meta.bad(format!("building the SentencePiece BPE model: {e}")))
}

/// `▁` back to spaces, `<0xNN>` tokens back to bytes, and the prefix space off
/// where one was added.
fn spm_decoder(meta: &Metadata, strip_prefix: bool) -> Result<DecoderSequence> {
    let spaces = Replace::new(SPACE.to_string(), " ").map_err(|e| meta.bad(e.to_string()))?;
    let mut decoders: Vec<DecoderWrapper> = vec![
        DecoderWrapper::Replace(spaces),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if strip_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    Ok(DecoderSequence::new(decoders))
}

/// Token to id; a token listed twice keeps its last id, as a Python dict does.
fn vocab<S: AsRef<str>>(tokens: &[S]) -> Vocab {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_ref().to_string(), i as u32))
        .collect()
}

/// The merges a SentencePiece vocabulary implies, as transformers'
/// `generate_merges` finds them: every split of a token into two tokens of the
/// vocabulary, those of one token ordered by the ids of their halves, then all
/// sorted by the token's score, best first, then by the lengths of the halves,
/// longer first (a stable sort, so ties keep the order of the tokens).
fn recover_merges(tokens: &[String], scores: &[f64]) -> Vec<(String, String)> {
    // Python dict semantics: the first occurrence fixes the order, the last
    // the id and the score.
    let mut entries: HashMap<&str, (u32, f64)> = HashMap::with_capacity(tokens.len());
    let mut order: Vec<&str> = Vec::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        if entries.insert(t, (i as u32, scores[i])).is_none() {
            order.push(t);
        }
    }
    let id = |t: &str| entries.get(t).map(|&(id, _)| id);
    // (left, right, score, chars in left, chars in right)
    let mut merges: Vec<(&str, &str, f64, usize, usize)> = vec![];
    for &token in &order {
        let start = merges.len();
        let score = entries[token].1;
        let n_chars = token.chars().count();
        for (k, (at, _)) in token.char_indices().skip(1).enumerate() {
            let (left, right) = token.split_at(at);
            if id(left).is_some() && id(right).is_some() {
                merges.push((left, right, score, k + 1, n_chars - k - 1));
            }
        }
        merges[start..].sort_by_key(|&(l, r, ..)| (id(l), id(r)));
    }
    merges.sort_by(|a, b| {
        b.2.partial_cmp(&a.2)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.3.cmp(&a.3))
            .then(b.4.cmp(&a.4))
    });
    merges
        .into_iter()
        .map(|(l, r, ..)| (l.to_string(), r.to_string()))
        .collect()
}

/// Python's `str.isspace` for one character: Unicode white space plus the
/// information separators U+001C..U+001F.
fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Adds BOS before and EOS after the text, as the file asks.
fn post_processor(
    meta: &Metadata,
    bos: Option<u32>,
    eos: Option<u32>,
) -> Result<TemplateProcessing> {
    let token = |id: u32| {
        meta.tokens
            .get(id as usize)
            .map(|t| t.to_string())
            .ok_or_else(|| meta.bad(format!("special token id {id} out of range")))
    };
    let mut specials = vec![];
    let (mut single, mut pair) = ("$A:0".to_string(), "$B:1".to_string());
    if let Some(id) = bos {
        let t = token(id)?;
        single = format!("{t}:0 {single}");
        pair = format!("{t}:1 {pair}");
        specials.push((t, id));
    }
    if let Some(id) = eos {
        let t = token(id)?;
        single = format!("{single} {t}:0");
        pair = format!("{pair} {t}:1");
        specials.push((t, id));
    }
    TemplateProcessing::builder()
        .try_single(single.as_str())
        .and_then(|b| b.try_pair(format!("{single} {pair}").as_str()))
        .map_err(|e| meta.bad(e.to_string()))?
        .special_tokens(specials)
        .build()
        .map_err(|e| meta.bad(e.to_string()))
}

/// Control tokens and the tokens the file names bos, eos, unk or pad (as
/// transformers passes those to the tokenizer class) as special added tokens,
/// user-defined ones as plain added tokens (those the vocabulary holds as
/// spelled), so that all stay whole in the text.
fn add_special_tokens(inner: &mut tokenizers::Tokenizer, meta: &Metadata) {
    let named: Vec<u32> = ["bos", "eos", "unknown", "padding"]
        .iter()
        .filter_map(|name| meta.id(&format!("tokenizer.ggml.{name}_token_id")))
        .collect();
    // In a byte-level vocabulary every real token is spelled in the byte
    // alphabet: a control token spelled otherwise is a llama.cpp mislabel,
    // which transformers skips (adding it would grow the vocabulary).
    let alphabet = byte_alphabet();
    let spelled = |t: &str| meta.kind != "gpt2" || t.chars().all(|c| alphabet.contains(&c));
    let control: Vec<AddedToken> = meta
        .tokens
        .iter()
        .zip(&meta.types)
        .enumerate()
        .filter(|&(i, (t, &ty))| (ty == CONTROL && spelled(t)) || named.contains(&(i as u32)))
        .map(|(_, (t, _))| AddedToken::from(t.to_string(), true).normalized(false))
        .collect();
    inner.add_special_tokens(&control);
    let user: Vec<AddedToken> = meta
        .tokens
        .iter()
        .zip(&meta.types)
        .filter(|&(t, &ty)| ty == USER_DEFINED && inner.token_to_id(t).is_some())
        .map(|(t, _)| AddedToken::from(t.to_string(), false).normalized(false))
        .collect();
    inner.add_tokens(&user);
}
