//! `radix generate`: text from a decoder (LLaMA, Mistral, Qwen2, Qwen3,
//! Gemma 3) in a GGUF file or a Hugging Face folder (SmolLM2 by default). One prompt streams its continuation to stdout (or prints one
//! JSON object); without a prompt, a terminal gets a chat loop and a pipe is
//! read as the prompt.
//!
//! The KV cache holds `prompt + max_tokens` positions rounded up to a power
//! of two, so the same command reuses the executables it compiled before
//! (from the executable cache). Compilation happens before the timed prefill
//! and decode, so the tokens/s line measures running only.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use clap::Args;
use indicatif::ProgressBar;
use radix::Platform;
use radix::collective::{process_count, process_index};
use radix::nn::{CacheType, MatrixFormat};
use radix_models::constraint::{Grammar, Vocabulary};
use radix_models::engine::{Engine, Generation, ModelFile, Plan};
use radix_models::pick::Picker;
use radix_models::sampling::Sampler;
use radix_models::transformer::DecoderConfig;
use radix_text::{ChatMessage, TemplateOrigin, Tokenizer};
use serde_json::json;

use crate::Cli;

/// The options of `radix generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// The prompt. Without one: a chat on a terminal, else read from stdin.
    prompt: Option<String>,
    /// `smollm2` (SmolLM2-135M-Instruct, fetched on first use), a GGUF file
    /// or a Hugging Face folder (`config.json`, safetensors, `tokenizer.json`).
    #[arg(long, default_value = "smollm2", value_name = "smollm2|PATH")]
    model: String,
    /// The most tokens to generate; fewer at a token that ends the turn
    /// (end-of-sequence, `<end_of_turn>`, `<|im_end|>`, ...) or the end of the
    /// model's context.
    #[arg(long, default_value_t = 128, value_name = "N")]
    max_tokens: usize,
    /// Sampling temperature; 0 always picks the most likely token (greedy).
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    temperature: f64,
    /// Sample among the K most likely tokens only.
    #[arg(long, value_name = "K")]
    top_k: Option<usize>,
    /// Sample among the most likely tokens up to this total probability only
    /// (0 < P <= 1).
    #[arg(long, value_name = "P")]
    top_p: Option<f64>,
    /// Seed of the sampler (default: from the clock).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Format the prompt as a user message with the model's chat template.
    #[arg(long)]
    chat: bool,
    /// Print one JSON object (prompt and generated ids, text, tokens/s and
    /// where the time went) instead of streaming the text.
    #[arg(long)]
    json: bool,
    /// How a step runs: each layer as a call of one block executable (fast
    /// to compile and to load), or the whole model as one program (one
    /// dispatch per token; runs of layers of one kind are loops over their
    /// weights, stacked at load, which holds those weights twice).
    #[arg(long, value_enum, default_value_t = PlanArg::PerBlock)]
    plan: PlanArg,
    /// The form of the model's matrices on the device: as the file stores
    /// them (quantized matrices stay quantized, read by radix's kernels), or
    /// all dequantized at load to f32 or bf16.
    #[arg(long, value_enum, default_value_t = DtypeArg::Stored)]
    dtype: DtypeArg,
    /// Multiply quantized matrices by f32 activations (`W·x`) rather than by
    /// activations quantized to 8 bits as llama.cpp does (`W·x̃`, the default
    /// for every block format: faster).
    #[arg(long)]
    exact: bool,
    /// How the key/value cache stores keys and values: f16 (half the
    /// memory, rounded to f16, as llama.cpp keeps them by default), f32, or
    /// q8_0 (llama.cpp's 8-bit blocks, 34 bytes per 32 values: about a
    /// quarter of f32's memory; heads must be a multiple of 32 wide).
    #[arg(long, value_enum, default_value_t = CacheTypeArg::F16)]
    cache_type: CacheTypeArg,
    /// The reply is JSON valid against the JSON schema in this file
    /// (enforced while sampling).
    #[arg(long, value_name = "FILE", conflicts_with = "grammar")]
    json_schema: Option<PathBuf>,
    /// The reply follows the grammar in this file: GBNF (`root ::= ...`,
    /// as llama.cpp reads it) or llguidance's Lark (`start: ...`).
    #[arg(long, value_name = "FILE")]
    grammar: Option<PathBuf>,
    /// With `--json`: add the model's logits before each generated token
    /// (one row of the vocabulary's size per token).
    #[arg(long, requires = "json")]
    logits: bool,
    /// A `peft` LoRA adapter folder (`adapter_config.json`,
    /// `adapter_model.safetensors`) to apply to the model's linear layers.
    #[arg(long, value_name = "DIR")]
    lora: Option<PathBuf>,
    /// Split the model over the processes of the job this process is one
    /// of (`radix launch -n N -- radix generate --tensor-parallel ...`):
    /// each holds some of every block's heads and MLP units, the blocks'
    /// outputs are summed over the processes, and the first process
    /// prints. Started alone, a process holds the whole model.
    #[arg(long, conflicts_with = "lora")]
    tensor_parallel: bool,
}

impl GenerateArgs {
    /// The form `--dtype` and `--exact` ask for.
    pub(crate) fn matrices(&self) -> anyhow::Result<MatrixFormat> {
        matrix_format(self.dtype, self.exact)
    }
}

/// The form of the matrices `--dtype` and `--exact` ask for; `--exact`
/// only means something for matrices kept as stored.
pub(crate) fn matrix_format(dtype: DtypeArg, exact: bool) -> anyhow::Result<MatrixFormat> {
    match (dtype, exact) {
        (DtypeArg::Stored, true) => Ok(MatrixFormat::Exact),
        (_, false) => Ok(dtype.into()),
        (_, true) => anyhow::bail!(
            "--exact is for matrices as stored: --dtype f32 and bf16 products are exact already"
        ),
    }
}

/// `--cache-type`.
#[allow(non_camel_case_types)] // ggml's name
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum CacheTypeArg {
    /// f16.
    F16,
    /// f32.
    F32,
    /// llama.cpp's Q8_0 blocks.
    #[value(name = "q8_0")]
    Q8_0,
}

impl CacheTypeArg {
    /// The cache type.
    pub(crate) fn cache_type(self) -> CacheType {
        match self {
            CacheTypeArg::F16 => CacheType::F16,
            CacheTypeArg::F32 => CacheType::F32,
            CacheTypeArg::Q8_0 => CacheType::Q8_0,
        }
    }
}

/// `--dtype`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum DtypeArg {
    /// As the file stores them.
    Stored,
    /// f32.
    F32,
    /// bf16.
    Bf16,
}

impl From<DtypeArg> for MatrixFormat {
    fn from(d: DtypeArg) -> MatrixFormat {
        match d {
            DtypeArg::Stored => MatrixFormat::AsStored,
            DtypeArg::F32 => MatrixFormat::F32,
            DtypeArg::Bf16 => MatrixFormat::BF16,
        }
    }
}

/// `--plan`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum PlanArg {
    /// Each layer a call of one block executable.
    PerBlock,
    /// The whole model as one program, runs of layers of one kind as loops.
    OneProgram,
}

impl From<PlanArg> for Plan {
    fn from(p: PlanArg) -> Plan {
        match p {
            PlanArg::PerBlock => Plan::PerBlock,
            PlanArg::OneProgram => Plan::OneProgram,
        }
    }
}

/// Runs `radix generate`.
pub fn run(cli: &Cli, args: &GenerateArgs) -> Result<()> {
    let (sampler, seed) = sampler(args)?;
    let grammar = grammar(args)?;
    let model = Model::open(&args.model)?;
    let constraint = grammar
        .map(|(flag, g)| -> Result<_> {
            let stops = &model.stops;
            let vocab = Vocabulary::new(&model.tokenizer, model.tokenizer.vocab_size(), stops)?;
            vocab
                .constraint(&g)
                .with_context(|| format!("{flag} does not compile"))
        })
        .transpose()?;
    let mut picker = Picker::new(sampler.clone()).with_constraint(constraint);
    // In a tensor-parallel job only the first process reads standard input
    // and speaks; the others must see the same prompt.
    ensure!(
        args.prompt.is_some() || !args.tensor_parallel,
        "--tensor-parallel needs the prompt as an argument (every process must read the same one)"
    );
    let speaks = !args.tensor_parallel || process_index()? == 0;
    let prompt = match &args.prompt {
        Some(p) => p.clone(),
        None if std::io::stdin().is_terminal() => {
            ensure!(
                args.json_schema.is_none() && args.grammar.is_none(),
                "--json-schema and --grammar need a prompt (not the chat loop)"
            );
            return chat_loop(cli, model, args, sampler);
        }
        None => read_stdin()?,
    };
    // A chat template writes the special tokens it wants; a plain prompt
    // gets those the tokenizer adds (Gemma's and Llama's BOS).
    let (text, ids) = if args.chat {
        model.say_which_chat_template();
        let text = model.tokenizer.chat_prompt(&[ChatMessage::user(&prompt)])?;
        let ids = model.tokenizer.encode_without_added_tokens(&text)?;
        (text, ids)
    } else {
        let ids = model.tokenizer.encode(&prompt)?;
        (prompt, ids)
    };
    let n_new = model.n_new(ids.len(), args.max_tokens)?;
    let mut session = Session::new(open_platform(cli)?, model, 32, args)?;
    let mut logits = args.logits.then(Vec::new);
    let res = if args.json || !speaks {
        session.generate(&ids, n_new, &mut picker, logits.as_mut(), |_| Ok(()))?
    } else {
        let mut stdout = std::io::stdout().lock();
        let res = session.generate(&ids, n_new, &mut picker, None, |piece| {
            stdout.write_all(piece.as_bytes())?;
            Ok(stdout.flush()?)
        })?;
        writeln!(stdout)?;
        res
    };
    let tokenizer = &session.model.tokenizer;
    if !speaks {
        return Ok(());
    }
    // The cache as the engine that ran holds it.
    let engine = session.engine.as_ref();
    let cache_type = engine.map(|e| e.model().cache_type().name());
    let cache_bytes = engine.map(|e| e.cache_bytes_per_position());
    if args.json {
        let mut out = json!({
            "model": args.model,
            "prompt": text,
            "prompt_ids": ids,
            "ids": res.ids,
            "text": tokenizer.decode_skipping_special(&res.ids)?,
            "prefill_tokens_per_s": res.prefill_tokens_per_s(ids.len()),
            "decode_tokens_per_s": res.decode_tokens_per_s(),
            "load_s": session.load_time.as_secs_f64(),
            "compile_s": session.compile_time.as_secs_f64(),
            "prefill_s": res.prefill.as_secs_f64(),
            "decode_s": res.decode.as_secs_f64(),
            // From the weights on the device to the first new token: the
            // executables compiled (or loaded) and the prompt run.
            "first_token_s": (session.compile_time + res.prefill).as_secs_f64(),
            // As the flag spells it: `stored`, `f32`, `bf16`.
            "dtype": clap::ValueEnum::to_possible_value(&args.dtype).map(|v| v.get_name().to_string()),
            "exact": args.exact,
            "cache_type": cache_type,
            "cache_bytes_per_position": cache_bytes,
            "tensor_parallel": args.tensor_parallel.then(process_count).transpose()?,
            // The sampler's seed (given, or drawn from the clock): `--seed`
            // with it draws the same tokens again.
            "seed": seed,
        });
        if let Some(logits) = logits {
            out["logits"] = json!(logits);
        }
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
    } else {
        eprintln!("{}", summary(&res, ids.len()));
    }
    Ok(())
}

/// The grammar `--json-schema` or `--grammar` asks for, read from its
/// file, and the flag.
fn grammar(args: &GenerateArgs) -> Result<Option<(&'static str, Grammar)>> {
    let read = |flag: &str, path: &PathBuf| {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {flag} {}", path.display()))
    };
    if let Some(path) = &args.json_schema {
        let text = read("--json-schema", path)?;
        let schema = serde_json::from_str(&text)
            .with_context(|| format!("--json-schema {} is not JSON", path.display()))?;
        return Ok(Some(("--json-schema", Grammar::JsonSchema(schema))));
    }
    if let Some(path) = &args.grammar {
        let text = read("--grammar", path)?;
        return Ok(Some(("--grammar", Grammar::Grammar(text))));
    }
    Ok(None)
}

/// The sampler the options ask for, after checking them, and the seed it
/// draws with (none for greedy decoding).
fn sampler(args: &GenerateArgs) -> Result<(Sampler, Option<u64>)> {
    let t = args.temperature;
    ensure!(
        t.is_finite() && t >= 0.0,
        "--temperature must be 0 (greedy) or positive, got {t}"
    );
    if let Some(p) = args.top_p {
        ensure!(p > 0.0 && p <= 1.0, "--top-p must be in (0, 1], got {p}");
    }
    ensure!(args.top_k != Some(0), "--top-k must be at least 1");
    if t == 0.0 {
        // Greedy decoding draws nothing: these would be ignored.
        for (flag, given) in [
            ("--top-k", args.top_k.is_some()),
            ("--top-p", args.top_p.is_some()),
            ("--seed", args.seed.is_some()),
        ] {
            ensure!(
                !given,
                "{flag} needs sampling: give --temperature above 0 (0 is greedy)"
            );
        }
        return Ok((Sampler::greedy(), None));
    }
    let seed = match args.seed {
        Some(seed) => seed,
        None => {
            let clock = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            // Every process of a tensor-parallel job must draw the same
            // tokens: they agree on the largest of their clocks.
            if args.tensor_parallel {
                job_seed(clock)?
            } else {
                clock
            }
        }
    };
    tracing::info!("sampling at temperature {t} with seed {seed}");
    Ok((
        Sampler::sample(t, args.top_k, args.top_p, seed)?,
        Some(seed),
    ))
}

/// The largest of the job's processes' `seed`s, the same on every process.
fn job_seed(seed: u64) -> Result<u64> {
    /// The message tag of this exchange, apart from the programs' sites
    /// (numbered from 0), and made before any program runs.
    const SITE: u32 = u32::MAX;
    let world = radix_mpi::world()?;
    let mut agreed = [0u64];
    world.all_reduce(SITE, radix_mpi::ReduceOp::Max, &[seed], &mut agreed)?;
    Ok(agreed[0])
}

fn read_stdin() -> Result<String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("cannot read the prompt from stdin")?;
    let text = text.trim_end();
    ensure!(
        !text.is_empty(),
        "no prompt: give one as an argument or on stdin"
    );
    Ok(text.to_string())
}

/// The platform chosen on the command line.
pub fn open_platform(cli: &Cli) -> Result<Platform> {
    Ok(Platform::from_client(crate::devices::open_client(cli)?))
}

/// A spinner on stderr (hidden when stderr is not a terminal).
pub fn spinner(message: String) -> ProgressBar {
    let bar = ProgressBar::new_spinner().with_message(message);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// The model file, its tokenizer and limits, before anything is loaded
/// (read by the engine's [`ModelFile`]).
pub struct Model {
    /// The GGUF file or Hugging Face folder.
    pub path: PathBuf,
    /// The decoder's configuration.
    pub config: DecoderConfig,
    /// The model's tokenizer.
    pub tokenizer: Tokenizer,
    /// The longest sequence the model was trained on (`<arch>.context_length`,
    /// `max_position_embeddings`).
    pub context: usize,
    /// Tokens that end a reply: end-of-sequence, and the vocabulary's
    /// `<end_of_turn>`, `<|im_end|>` or `<|eot_id|>`.
    pub stops: Vec<u32>,
}

impl Model {
    /// Finds `name` (`smollm2`, fetched on first use, a GGUF path or a
    /// Hugging Face folder) and reads its tokenizer and metadata.
    pub fn open(name: &str) -> Result<Model> {
        let path = if name == "smollm2" {
            radix_models::packages::smollm2_gguf()?
        } else {
            let path = PathBuf::from(name);
            if !path.exists() {
                if path.components().count() == 1 && path.extension().is_none() {
                    bail!(
                        "unknown model {name:?}: the built-in model is smollm2, or give a GGUF file or a Hugging Face folder"
                    );
                }
                bail!("model file {} not found", path.display());
            }
            path
        };
        let file = ModelFile::open(&path)?;
        Ok(Model {
            config: file.config().clone(),
            tokenizer: file.tokenizer().clone(),
            context: file.context(),
            stops: file.tokenizer().stop_ids().to_vec(),
            path,
        })
    }

    /// Warns when the model ships no chat template and a known one stands in.
    fn say_which_chat_template(&self) {
        if let Some(TemplateOrigin::Known { architecture, name }) =
            self.tokenizer.chat_template().map(|t| t.origin())
        {
            tracing::warn!(
                "{} has no chat template (`tokenizer.chat_template`); using the known {name} \
                 template of the {architecture} architecture",
                self.path.display()
            );
        }
    }

    /// How many tokens to generate after a prompt of `n` tokens: at most
    /// `max_tokens`, and no further than the end of the context.
    fn n_new(&self, n: usize, max_tokens: usize) -> Result<usize> {
        ensure!(n > 0, "the prompt is empty");
        ensure!(
            n <= self.context,
            "the prompt is {n} tokens, longer than the model's context of {} tokens",
            self.context
        );
        Ok(max_tokens.min(self.context - n))
    }
}

/// [`Engine::open`] or another way of opening a model file.
type OpenEngine =
    fn(&Platform, &std::path::Path, usize, MatrixFormat) -> radix_models::Result<Engine>;

/// A model on a platform, its engine (re)loaded when a longer cache is needed.
struct Session {
    platform: Platform,
    model: Model,
    /// The smallest cache to load an engine with.
    min_capacity: usize,
    plan: Plan,
    matrices: MatrixFormat,
    cache_type: CacheType,
    /// The LoRA adapter folder, if any.
    lora: Option<PathBuf>,
    /// How the model is opened: whole, or this process's share.
    open: OpenEngine,
    engine: Option<Engine>,
    /// How long the last load of the weights took.
    load_time: Duration,
    /// How long the executables of the last generation took to compile (or
    /// to load from the executable cache).
    compile_time: Duration,
}

impl Session {
    fn new(
        platform: Platform,
        model: Model,
        min_capacity: usize,
        args: &GenerateArgs,
    ) -> anyhow::Result<Session> {
        Ok(Session {
            platform,
            model,
            min_capacity,
            plan: args.plan.into(),
            matrices: args.matrices()?,
            cache_type: args.cache_type.cache_type(),
            lora: args.lora.clone(),
            open: if args.tensor_parallel {
                Engine::open_tensor_parallel
            } else {
                Engine::open
            },
            engine: None,
            load_time: Duration::ZERO,
            compile_time: Duration::ZERO,
        })
    }

    /// An engine whose cache holds at least `positions`, compiled for prompts
    /// of `n` tokens.
    fn engine(&mut self, positions: usize, n: usize) -> Result<&mut Engine> {
        if self
            .engine
            .as_ref()
            .is_none_or(|r| r.capacity() < positions)
        {
            let capacity = positions.max(self.min_capacity).next_power_of_two();
            let name = self.model.path.file_name().unwrap_or_default().display();
            let bar = spinner(format!("loading {name}"));
            let t = Instant::now();
            self.engine = None;
            let (platform, path) = (&self.platform, &self.model.path);
            let engine = match &self.lora {
                None => (self.open)(platform, path, capacity, self.matrices),
                Some(dir) => Engine::open_with_lora(platform, path, dir, capacity, self.matrices),
            };
            let mut engine = engine
                .and_then(|r| r.with_cache_type(self.cache_type))
                .with_context(|| match &self.lora {
                    None => format!("cannot load {}", path.display()),
                    Some(dir) => format!(
                        "cannot load {} with the LoRA adapter {}",
                        path.display(),
                        dir.display()
                    ),
                })?
                .with_plan(self.plan);
            // One program's stacked weights are part of the load.
            engine.prepare_weights()?;
            bar.finish_and_clear();
            self.load_time = t.elapsed();
            tracing::info!("loaded {name} in {:.2?}", self.load_time);
            self.engine = Some(engine);
        }
        let engine = self.engine.as_mut().context("no engine")?;
        let bar = spinner("compiling (or loading from the executable cache)".into());
        let t = Instant::now();
        engine.compile(n)?;
        bar.finish_and_clear();
        self.compile_time = t.elapsed();
        tracing::info!(
            "prefill ({n} tokens) and decode executables (cache of {} positions) ready in {:.2?}",
            engine.capacity(),
            self.compile_time
        );
        Ok(engine)
    }

    /// Generates up to `n_new` tokens after `ids` with `picker`, calling
    /// `emit` with each new piece of text (and keeping each step's logits in
    /// `logits`, if given), and stops after a stop token.
    fn generate(
        &mut self,
        ids: &[u32],
        n_new: usize,
        picker: &mut Picker,
        mut logits: Option<&mut Vec<Vec<f32>>>,
        mut emit: impl FnMut(&str) -> Result<()>,
    ) -> Result<Generation> {
        if n_new == 0 {
            return Ok(Generation::default());
        }
        let stops = self.model.stops.clone();
        let tokenizer = self.model.tokenizer.clone();
        let mut text = TextStream::default();
        let mut ids_so_far = vec![];
        let engine = self.engine(ids.len() + n_new, ids.len())?;
        let pick = |l: &[f32]| {
            if let Some(rows) = logits.as_mut() {
                rows.push(l.to_vec());
            }
            picker.pick(l)
        };
        let res = engine.generate_with(ids, n_new, pick, |next| -> Result<bool> {
            ids_so_far.push(next);
            emit(&text.push(&tokenizer, &ids_so_far)?)?;
            Ok(!stops.contains(&next))
        })?;
        emit(&text.finish(&tokenizer, &ids_so_far)?)?;
        Ok(res)
    }
}

/// One line: prompt and generated tokens and their speeds.
fn summary(res: &Generation, n_prompt: usize) -> String {
    let speed = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    format!(
        "prefill: {n_prompt} tokens, {} tokens/s; decode: {} tokens, {} tokens/s",
        speed(res.prefill_tokens_per_s(n_prompt)),
        res.ids.len(),
        speed(res.decode_tokens_per_s()),
    )
}

/// Turns a growing list of ids into text pieces, holding back a piece that
/// ends inside a multi-byte character.
#[derive(Default)]
pub struct TextStream {
    printed: usize,
}

impl TextStream {
    /// The text `ids` add to what was returned before.
    pub fn push(&mut self, tokenizer: &Tokenizer, ids: &[u32]) -> Result<String> {
        let full = tokenizer.decode_skipping_special(ids)?;
        if full.ends_with('\u{FFFD}') || !full.is_char_boundary(self.printed) {
            return Ok(String::new());
        }
        let piece = full.get(self.printed..).unwrap_or_default().to_string();
        self.printed = full.len();
        Ok(piece)
    }

    /// The text of `ids`, the last of the sequence, not returned yet: a
    /// character left incomplete comes out as U+FFFD, as the whole
    /// sequence decodes.
    pub fn finish(&mut self, tokenizer: &Tokenizer, ids: &[u32]) -> Result<String> {
        let full = tokenizer.decode_skipping_special(ids)?;
        let mut from = self.printed.min(full.len());
        while !full.is_char_boundary(from) {
            from += 1;
        }
        self.printed = full.len();
        Ok(full[from..].to_string())
    }
}

/// Chats on the terminal: each line is a user message; the reply streams
/// back. The history is formatted with the chat template each turn, oldest
/// exchanges dropped when it outgrows the context.
fn chat_loop(cli: &Cli, model: Model, args: &GenerateArgs, sampler: Sampler) -> Result<()> {
    let mut picker = Picker::new(sampler);
    // A longer cache than the first turns need, so that later turns reuse it.
    model.say_which_chat_template();
    let mut session = Session::new(open_platform(cli)?, model, 1024, args)?;
    let mut history: Vec<ChatMessage> = vec![];
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout();
    eprintln!("Chat with {}; an empty line or Ctrl-D ends.", args.model);
    loop {
        eprint!("> ");
        std::io::stderr().flush()?;
        let mut line = String::new();
        if stdin.read_line(&mut line)? == 0 || line.trim().is_empty() {
            return Ok(());
        }
        history.push(ChatMessage::user(line.trim()));
        let ids = loop {
            let ids = session.model.tokenizer.chat_prompt_ids(&history)?;
            if ids.len() < session.model.context || history.len() <= 1 {
                break ids;
            }
            history.drain(..2.min(history.len() - 1));
        };
        let n_new = session.model.n_new(ids.len(), args.max_tokens)?;
        let res = session.generate(&ids, n_new, &mut picker, None, |piece| {
            stdout.write_all(piece.as_bytes())?;
            Ok(stdout.flush()?)
        })?;
        writeln!(stdout)?;
        eprintln!("{}", summary(&res, ids.len()));
        let reply = session.model.tokenizer.decode_skipping_special(&res.ids)?;
        history.push(ChatMessage::assistant(reply.trim()));
    }
}
