//! Tokenizers: HF `tokenizer.json` files and the gpt2-style BPE vocabularies
//! embedded in GGUF files, both as a [`Tokenizer`] wrapping the `tokenizers`
//! crate, plus ChatML chat templates.
//!
//! A GGUF vocabulary is built the way transformers builds it
//! (`GGUFGPTConverter`): a BPE model over `tokenizer.ggml.tokens` and
//! `tokenizer.ggml.merges`, a ByteLevel pre-tokenizer (GPT-2 regex, no prefix
//! space) and decoder, and the control tokens (token type 3) as special added
//! tokens. Like transformers, it ignores `tokenizer.ggml.pre` (llama.cpp uses it
//! to pick a different pre-tokenizer regex).

use std::path::{Path, PathBuf};

use tokenizers::AddedToken;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::template::TemplateProcessing;

use radix::io::Gguf;
use radix::io::gguf::GgufValue;

use crate::{Error, Result};

/// A text tokenizer: encodes text to token ids and decodes ids to text, and
/// formats chats for instruct models.
///
/// Padding and truncation are left to the caller (a `tokenizer.json` may
/// configure them; they are switched off here, as transformers does by default).
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
    bos: Option<u32>,
    eos: Option<u32>,
    chat: Option<ChatTemplate>,
}

/// One message of a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// A chat template radix can apply.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ChatTemplate {
    /// ChatML: `<|im_start|>{role}\n{content}<|im_end|>\n` per message, with a
    /// default system message inserted when the chat does not start with one.
    ChatMl { default_system: Option<String> },
    /// A template radix does not implement; applying it is an `Err`.
    Unsupported,
}

impl ChatMessage {
    /// A message from `role`.
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
        }
    }

    /// A `system` message.
    pub fn system(content: &str) -> Self {
        ChatMessage::new("system", content)
    }

    /// A `user` message.
    pub fn user(content: &str) -> Self {
        ChatMessage::new("user", content)
    }

    /// An `assistant` message.
    pub fn assistant(content: &str) -> Self {
        ChatMessage::new("assistant", content)
    }
}

impl Tokenizer {
    /// Loads an HF `tokenizer.json`. A `tokenizer_config.json` next to it, if
    /// present, supplies the bos/eos tokens and the chat template.
    pub fn from_file(path: &Path) -> Result<Self> {
        let mut inner = tokenizers::Tokenizer::from_file(path).map_err(|e| Error::Tokenizer {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        inner.with_padding(None);
        inner.with_truncation(None).map_err(|e| Error::Tokenizer {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut tok = Tokenizer {
            inner,
            path: path.to_path_buf(),
            bos: None,
            eos: None,
            chat: None,
        };
        let config_path = path.with_file_name("tokenizer_config.json");
        if let Ok(text) = std::fs::read_to_string(&config_path) {
            let config: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Tokenizer {
                    path: config_path.clone(),
                    reason: e.to_string(),
                })?;
            let token = |key: &str| {
                let v = config.get(key)?;
                let s = v.as_str().or_else(|| v.get("content")?.as_str())?;
                tok.inner.token_to_id(s)
            };
            tok.bos = token("bos_token");
            tok.eos = token("eos_token");
            tok.chat = config
                .get("chat_template")
                .and_then(|t| t.as_str())
                .map(ChatTemplate::parse);
        }
        Ok(tok)
    }

    /// Builds the tokenizer embedded in a GGUF file (`tokenizer.ggml.model` must
    /// be `gpt2`: byte-level BPE).
    pub fn from_gguf(gguf: &Gguf) -> Result<Self> {
        let path = gguf.path();
        let bad = |reason: String| Error::Tokenizer {
            path: path.to_path_buf(),
            reason,
        };
        let model = gguf.get("tokenizer.ggml.model").and_then(GgufValue::as_str);
        if model != Some("gpt2") {
            return Err(bad(format!(
                "`tokenizer.ggml.model` is {model:?}; only \"gpt2\" (byte-level BPE) is supported"
            )));
        }
        let strings = |key: &str| -> Result<Vec<&str>> {
            let arr = gguf
                .get(key)
                .and_then(GgufValue::as_array)
                .ok_or_else(|| bad(format!("no `{key}` array")))?;
            arr.iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| bad(format!("`{key}` holds a non-string")))
                })
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges")?;
        let types: Vec<i64> = match gguf
            .get("tokenizer.ggml.token_type")
            .and_then(GgufValue::as_array)
        {
            Some(arr) => arr.iter().map(|v| v.as_i64().unwrap_or(1)).collect(),
            None => vec![1; tokens.len()],
        };
        let id = |key: &str| {
            gguf.get(key)
                .and_then(GgufValue::as_i64)
                .and_then(|i| u32::try_from(i).ok())
        };
        let (bos, eos) = (
            id("tokenizer.ggml.bos_token_id"),
            id("tokenizer.ggml.eos_token_id"),
        );

        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let merges = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("a merge in `tokenizer.ggml.merges` is not two tokens".into()))?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| bad(format!("building the BPE model: {e}")))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        inner.with_decoder(Some(ByteLevel::default()));
        let add_bos = gguf
            .get("tokenizer.ggml.add_bos_token")
            .and_then(GgufValue::as_bool)
            == Some(true);
        if let (true, Some(bos)) = (add_bos, bos) {
            let bos_token = tokens
                .get(bos as usize)
                .ok_or_else(|| bad(format!("bos id {bos} out of range")))?;
            let post = TemplateProcessing::builder()
                .try_single(format!("{bos_token} $A"))
                .and_then(|b| b.try_pair(format!("{bos_token} $A {bos_token} $B")))
                .map_err(|e| bad(e.to_string()))?
                .special_tokens(vec![(bos_token.to_string(), bos)])
                .build()
                .map_err(|e| bad(e.to_string()))?;
            inner.with_post_processor(Some(post));
        }
        let specials: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|&(_, &ty)| ty == 3)
            .map(|(t, _)| AddedToken::from(t.to_string(), true))
            .collect();
        inner.add_special_tokens(&specials);
        let chat = gguf
            .get("tokenizer.chat_template")
            .and_then(GgufValue::as_str)
            .map(ChatTemplate::parse);
        Ok(Tokenizer {
            inner,
            path: path.to_path_buf(),
            bos,
            eos,
            chat,
        })
    }

    /// Encodes `text`, adding the special tokens the tokenizer's post-processor
    /// adds (BERT's `[CLS]`/`[SEP]`; nothing for SmolLM2), as transformers'
    /// `tokenizer(text)` does. Special tokens written in `text` (`<|im_start|>`)
    /// become their ids either way.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_impl(text, true)
    }

    /// Encodes `text` without the post-processor's special tokens (transformers'
    /// `add_special_tokens=False`).
    pub fn encode_without_added_tokens(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_impl(text, false)
    }

    /// Decodes `ids` to text, special tokens included (transformers' `decode`).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.decode_impl(ids, false)
    }

    /// Decodes `ids` to text, leaving special tokens out.
    pub fn decode_skipping_special(&self, ids: &[u32]) -> Result<String> {
        self.decode_impl(ids, true)
    }

    /// The id of token `token`.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token with id `id`.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The beginning-of-sequence id, if the file names one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence id, if the file names one (generation stops there).
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// The file the tokenizer came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// `messages` formatted by the model's chat template, ending with the prompt
    /// for the assistant's reply (`add_generation_prompt=True`). `Err` if the
    /// model has no chat template or one radix does not implement (only ChatML).
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<String> {
        self.chat_impl(messages, true)
    }

    /// `messages` formatted by the model's chat template, without a generation
    /// prompt (a finished transcript).
    pub fn chat_transcript(&self, messages: &[ChatMessage]) -> Result<String> {
        self.chat_impl(messages, false)
    }

    fn encode_impl(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| self.err(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    fn decode_impl(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| self.err(e.to_string()))
    }

    fn chat_impl(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let default_system = match &self.chat {
            Some(ChatTemplate::ChatMl { default_system }) => default_system,
            Some(ChatTemplate::Unsupported) => {
                return Err(self.err("the chat template is not ChatML".into()));
            }
            None => return Err(self.err("the model has no chat template".into())),
        };
        let mut out = String::new();
        let mut turn = |role: &str, content: &str| {
            out.push_str("<|im_start|>");
            out.push_str(role);
            out.push('\n');
            out.push_str(content);
            out.push_str("<|im_end|>\n");
        };
        if let Some(system) = default_system
            && messages.first().is_none_or(|m| m.role != "system")
            && !messages.is_empty()
        {
            turn("system", system);
        }
        for m in messages {
            turn(&m.role, &m.content);
        }
        if add_generation_prompt {
            out.push_str("<|im_start|>assistant\n");
        }
        Ok(out)
    }

    fn err(&self, reason: String) -> Error {
        Error::Tokenize {
            path: self.path.clone(),
            reason,
        }
    }
}

impl ChatTemplate {
    /// Recognizes a ChatML jinja template and the default system message it
    /// inserts when the first message is not a system message.
    fn parse(template: &str) -> ChatTemplate {
        const SYSTEM: &str = "<|im_start|>system\n";
        if !template.contains("<|im_start|>") || !template.contains("<|im_end|>") {
            return ChatTemplate::Unsupported;
        }
        let default_system =
            if template.contains("!= 'system'") || template.contains("!= \"system\"") {
                template
                    .find(SYSTEM)
                    .map(|i| &template[i + SYSTEM.len()..])
                    .and_then(|rest| rest.find("<|im_end|>").map(|j| rest[..j].to_string()))
            } else {
                None
            };
        ChatTemplate::ChatMl { default_system }
    }
}
