//! Tokenizers: HF `tokenizer.json` files and the vocabularies embedded in GGUF
//! files (`gguf_vocab.rs`), both as a [`Tokenizer`] wrapping the `tokenizers`
//! crate, with the model's chat template (`chat.rs`) and the tokens that end
//! a turn.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use radix_io::Gguf;
use radix_io::gguf::GgufValue;

use crate::chat::{ChatMessage, ChatTemplate};
use crate::gguf_vocab::{self, GgufVocab, TURN_ENDS};
use crate::{Error, Result};

/// A text tokenizer: encodes text to token ids and decodes ids to text, and
/// formats chats for instruct models.
///
/// Padding and truncation are left to the caller (a `tokenizer.json` may
/// configure them; they are switched off here, as transformers does by default).
#[derive(Debug, Clone)]
pub struct Tokenizer {
    /// Shared by clones: a server's request handlers, its generation loop
    /// and its grammars' vocabulary each hold the tokenizer, which is
    /// megabytes of tables (SmolLM2's: ~8 MB) never changed once built.
    inner: Arc<tokenizers::Tokenizer>,
    path: PathBuf,
    bos: Option<u32>,
    eos: Option<u32>,
    /// The end-of-sequence id and the control tokens of [`TURN_ENDS`].
    stops: Vec<u32>,
    chat: Option<ChatTemplate>,
    /// Counted once: the tokenizers crate counts by building a map of the
    /// whole vocabulary (a megabyte and ~50,000 strings for SmolLM2's), and
    /// a server asks on every request.
    vocab_size: usize,
}

impl Tokenizer {
    /// Loads an HF `tokenizer.json`. A `tokenizer_config.json` next to it, if
    /// present, supplies the bos/eos tokens and the chat template (or a
    /// `chat_template.jinja` beside it, as newer transformers writes it).
    pub fn from_file(path: &Path) -> Result<Self> {
        let bad = |path: &Path, reason: String| Error::Tokenizer {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(path, e.to_string()))?;
        // The tokenizers crate panics on some malformed files (a decoder
        // whose string holds a control character: it re-reads part of the
        // file and `expect`s): the JSON is checked first, and a panic left
        // in a file that is JSON is an error too.
        serde_json::from_str::<serde_json::Value>(&text)
            .map_err(|e| bad(path, format!("not JSON: {e}")))?;
        let mut inner = std::panic::catch_unwind(|| text.parse::<tokenizers::Tokenizer>())
            .map_err(|_| bad(path, "the tokenizers library cannot read it".into()))?
            .map_err(|e| bad(path, e.to_string()))?;
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| bad(path, e.to_string()))?;
        let config_path = path.with_file_name("tokenizer_config.json");
        let config: serde_json::Value = match std::fs::read_to_string(&config_path) {
            Ok(text) => {
                serde_json::from_str(&text).map_err(|e| bad(&config_path, e.to_string()))?
            }
            Err(_) => serde_json::Value::Null,
        };
        let token = |key: &str| {
            let v = config.get(key)?;
            v.as_str().or_else(|| v.get("content")?.as_str())
        };
        let (bos_token, eos_token) = (token("bos_token"), token("eos_token"));
        let source = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            // A list of named templates: the default one.
            Some(serde_json::Value::Array(named)) => named
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str())
                .map(str::to_string),
            _ => std::fs::read_to_string(path.with_file_name("chat_template.jinja")).ok(),
        };
        let chat = source
            .map(|s| ChatTemplate::shipped(&s, bos_token.unwrap_or(""), eos_token.unwrap_or("")));
        let (bos, eos) = (
            bos_token.and_then(|t| inner.token_to_id(t)),
            eos_token.and_then(|t| inner.token_to_id(t)),
        );
        Ok(Tokenizer::new(inner, path, bos, eos, chat))
    }

    /// Builds the tokenizer embedded in a GGUF file, the way transformers
    /// builds it from the same file: byte-level BPE (`tokenizer.ggml.model` =
    /// `gpt2`) or SentencePiece (`llama`); any other kind is an `Err` naming the
    /// file, the key and the value. The chat template is the file's
    /// `tokenizer.chat_template`, else the known one of its architecture.
    pub fn from_gguf(gguf: &Gguf) -> Result<Self> {
        let GgufVocab { inner, bos, eos } = gguf_vocab::build(gguf)?;
        let token = |id: Option<u32>| id.and_then(|i| inner.id_to_token(i)).unwrap_or_default();
        let (bos_token, eos_token) = (token(bos), token(eos));
        let chat = match gguf
            .get("tokenizer.chat_template")
            .and_then(GgufValue::as_str)
        {
            Some(source) => Some(ChatTemplate::shipped(source, &bos_token, &eos_token)),
            None => gguf
                .get("general.architecture")
                .and_then(GgufValue::as_str)
                .and_then(|arch| ChatTemplate::known(arch, &bos_token, &eos_token)),
        };
        Ok(Tokenizer::new(inner, gguf.path(), bos, eos, chat))
    }

    fn new(
        inner: tokenizers::Tokenizer,
        path: &Path,
        bos: Option<u32>,
        eos: Option<u32>,
        chat: Option<ChatTemplate>,
    ) -> Self {
        let specials = inner.get_added_tokens_decoder();
        let mut stops: Vec<u32> = eos.into_iter().collect();
        for name in TURN_ENDS {
            if let Some(id) = inner.token_to_id(name)
                && specials.get(&id).is_some_and(|t| t.special)
                && !stops.contains(&id)
            {
                stops.push(id);
            }
        }
        Tokenizer {
            vocab_size: inner.get_vocab_size(true),
            inner: Arc::new(inner),
            path: path.to_path_buf(),
            bos,
            eos,
            stops,
            chat,
        }
    }

    /// Encodes `text`, adding the special tokens the tokenizer's post-processor
    /// adds (BERT's `[CLS]`/`[SEP]`, the BOS of Gemma and Llama; nothing for
    /// SmolLM2), as transformers' `tokenizer(text)` does. Special tokens
    /// written in `text` (`<|im_start|>`) become their ids either way.
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
        self.vocab_size
    }

    /// The beginning-of-sequence id, if the file names one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence id, if the file names one (generation stops there).
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// The ids that end a turn, where generation stops: the end-of-sequence
    /// id and, where the vocabulary holds them as special tokens,
    /// `<end_of_turn>` (Gemma), `<|im_end|>` (ChatML), `<|eot_id|>` (Llama 3)
    /// and `<|end|>` (Phi-3).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stops
    }

    /// The chat template: the model's own, or the known one of its
    /// architecture when it ships none ([`ChatTemplate::origin`] says which).
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
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
    /// for the assistant's reply (`add_generation_prompt=True`), as
    /// transformers' `apply_chat_template` formats them. `Err` if the model has
    /// no chat template, or its template fails (a syntax error, or an exception
    /// it raises, such as roles that do not alternate).
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<String> {
        self.chat_impl(messages, true)
    }

    /// [`Tokenizer::chat_prompt`] of messages as OpenAI sends them (JSON
    /// objects, which may carry `tool_calls` and `tool_call_id`) with the
    /// `tools` the model may call passed to the template (see
    /// [`ChatTemplate::render_json`]).
    pub fn chat_prompt_json(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
    ) -> Result<String> {
        let Some(template) = &self.chat else {
            return Err(self.err("the model has no chat template".into()));
        };
        if messages.is_empty() {
            return Err(self.err("cannot apply the chat template to an empty chat".into()));
        }
        template
            .render_json(messages, tools, true)
            .map_err(|reason| self.err(reason))
    }

    /// The ids of [`Tokenizer::chat_prompt`], as transformers'
    /// `apply_chat_template(tokenize=True)` gives them: the template writes
    /// the special tokens it wants (Gemma's `<bos>`), so none are added.
    pub fn chat_prompt_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        self.encode_without_added_tokens(&self.chat_prompt(messages)?)
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
        let Some(template) = &self.chat else {
            return Err(self.err("the model has no chat template".into()));
        };
        if messages.is_empty() {
            // As transformers refuses it, before the template sees it.
            return Err(self.err("cannot apply the chat template to an empty chat".into()));
        }
        template
            .render(messages, add_generation_prompt)
            .map_err(|reason| self.err(reason))
    }

    fn err(&self, reason: String) -> Error {
        Error::Tokenize {
            path: self.path.clone(),
            reason,
        }
    }
}
