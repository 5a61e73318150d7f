//! `radix-bench`: the radix side of `bench/run`.
//!
//! Each subcommand measures one comparison of `BENCHMARKS.md` for radix and
//! prints one JSON object on stdout: the raw samples of every figure (so
//! that `bench/report.py` computes the same statistics for radix and its
//! peers), facts about the run, and the process's peak RSS. The peers'
//! scripts in `bench/py/` print the same shape of object.
//!
//! Every timed loop runs after a warm-up call, so compilation is never timed
//! except in `warm-start`, which times nothing else.

mod all_reduce;
mod llama_program;
mod measure;
mod train;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use clap::{Parser, Subcommand};
use radix::io::Gguf;
use radix::nn::{CacheType, MatrixFormat};
use radix::{Buffer, CacheMode, CompileConfig, DType, Origin, Platform, Shape, Tensor};
use radix_models::bert::{Embedder, EmbedderConfig};
use radix_models::engine::Plan;
use serde_json::json;

use crate::measure::{Report, time_per_call};

#[derive(Parser)]
#[command(about = "The radix side of bench/run: JSON timings on stdout")]
struct Cli {
    /// The name of the system in the figures' names (e.g. for a variant run
    /// with other XLA flags).
    #[arg(long, global = true, default_value = "radix")]
    label: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fetches the model packages and prints where their files are.
    Paths,
    /// Tiny add: `Executable::call` + wait versus raw PJRT execute + wait.
    Dispatch {
        #[arg(long, default_value_t = 200)]
        samples: usize,
        #[arg(long, default_value_t = 500)]
        calls_per_sample: usize,
    },
    /// Model code to StableHLO text: the SmolLM2 prefill program.
    Trace {
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Also writes the StableHLO text here.
        #[arg(long)]
        write: Option<PathBuf>,
    },
    /// Code to executable: compile into an empty cache, then load from it.
    WarmStart {
        #[arg(long, default_value_t = 3)]
        compiles: usize,
        #[arg(long, default_value_t = 10)]
        loads: usize,
    },
    /// all-MiniLM-L6-v2 sentences/s at 1 x 16 and 32 x 128 tokens, and at 1 x 20
    /// and 32 x 100 (off radix's buckets).
    Minilm {
        /// The model folder (`config.json`, `model.safetensors`, `tokenizer.json`).
        #[arg(long)]
        dir: PathBuf,
        /// Timed samples per shape.
        #[arg(long, default_value_t = 10)]
        samples: usize,
        /// Only this shape (`1x16`, `32x128`, `1x20` or `32x100`), e.g. for a profile.
        #[arg(long)]
        shape: Option<String>,
        /// `kernels` (the default): every matrix through radix's CPU kernels
        /// (`MatrixFormat::Kernels`); `xla`: f32 matrices through XLA's dot
        /// (`MatrixFormat::AsStored`).
        #[arg(long, default_value = "kernels", value_parser = ["kernels", "xla"])]
        matrices: String,
    },
    /// SmolLM2 prefill and decode tokens/s.
    Smollm2(Smollm2Args),
    /// An f32 all-reduce (sum) between processes on this machine, inside a
    /// compiled program: started as a job of `ranks` processes.
    AllReduce {
        #[arg(long, default_value_t = 2)]
        ranks: usize,
        /// The vector's size.
        #[arg(long, default_value_t = 4)]
        mib: usize,
        #[arg(long, default_value_t = 20)]
        samples: usize,
        #[arg(long, default_value_t = 20)]
        calls_per_sample: usize,
    },
    /// One training step (loss, gradient, AdamW update, weights donated):
    /// the MNIST MLP on 128 images and the small llama of
    /// `examples/train_lm.rs` on 64 next tokens.
    Train {
        /// Timed samples per model.
        #[arg(long, default_value_t = 10)]
        samples: usize,
        /// Steps per sample.
        #[arg(long, default_value_t = 20)]
        steps_per_sample: usize,
    },
}

/// The options of `radix-bench smollm2`.
#[derive(clap::Args)]
struct Smollm2Args {
    #[arg(long)]
    gguf: PathBuf,
    #[arg(long, default_value_t = 128)]
    prompt: usize,
    #[arg(long, default_value_t = 128)]
    decode: usize,
    /// Timed prefills.
    #[arg(long, default_value_t = 10)]
    prefills: usize,
    /// Timed decodes of `decode` tokens each.
    #[arg(long, default_value_t = 3)]
    decodes: usize,
    /// How a step runs (see `radix_models::engine::Plan`).
    #[arg(long, default_value = "per-block", value_parser = ["per-block", "one-program"])]
    plan: String,
    /// The matrices on the device: as stored (quantized), f32 or bf16
    /// (see `radix::nn::MatrixFormat`).
    #[arg(long, default_value = "stored", value_parser = ["stored", "exact", "f32", "bf16"])]
    dtype: String,
    /// How the key/value cache stores keys and values (llama-bench's
    /// default is f16).
    #[arg(long, default_value = "f16", value_parser = ["f16", "f32", "q8_0"])]
    cache_type: String,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let report = match cli.command {
        Command::Paths => paths()?,
        Command::Dispatch {
            samples,
            calls_per_sample,
        } => dispatch(samples, calls_per_sample)?,
        Command::Trace { runs, write } => trace(runs, write.as_deref())?,
        Command::WarmStart { compiles, loads } => warm_start(compiles, loads)?,
        Command::Minilm {
            dir,
            samples,
            shape,
            matrices,
        } => {
            let matrices = match matrices.as_str() {
                "xla" => MatrixFormat::AsStored,
                _ => MatrixFormat::Kernels,
            };
            minilm(&cli.label, &dir, samples, shape.as_deref(), matrices)?
        }
        Command::Smollm2(args) => smollm2(&cli.label, &args)?,
        Command::Train {
            samples,
            steps_per_sample,
        } => train::train(samples, steps_per_sample)?,
        Command::AllReduce {
            ranks,
            mib,
            samples,
            calls_per_sample,
        } => {
            let args = all_reduce::Args {
                ranks,
                mib,
                samples,
                calls_per_sample,
            };
            match all_reduce::all_reduce_bench(&args)? {
                Some(report) => report,
                None => return Ok(()),
            }
        }
    };
    println!("{}", report.finish());
    Ok(())
}

fn paths() -> Result<Report> {
    let mut report = Report::new("paths");
    report.meta("minilm_dir", json!(radix_models::packages::minilm_dir()?));
    report.meta(
        "smollm2_gguf",
        json!(radix_models::packages::smollm2_gguf()?),
    );
    report.meta(
        "gemma3_gguf",
        json!(radix_models::packages::gemma3_270m_gguf()?),
    );
    let platform = Platform::cpu()?;
    let plugin = platform.client().plugin();
    let (major, minor) = plugin.api_version();
    report.meta("plugin", json!(plugin.path()));
    report.meta("plugin_sha256", json!(plugin.sha256()?));
    report.meta("pjrt_api", json!(format!("{major}.{minor}")));
    report.meta(
        "platform_version",
        json!(platform.client().platform_version()),
    );
    Ok(report)
}

fn dispatch(samples: usize, calls: usize) -> Result<Report> {
    let platform = Platform::cpu()?;
    let shape = Shape::new(DType::F32, &[4]);
    let exe = radix::compile_fn(
        &platform,
        &(Tensor::param(shape), Tensor::param(shape)),
        |(x, y)| x + y,
    )?;
    let raw = platform
        .client()
        .compile(&exe.program().stablehlo(), &Default::default())?;
    let a = Buffer::from_slice(&platform, &[1f32, 2., 3., 4.], shape)?;
    let b = Buffer::from_slice(&platform, &[1f32, 2., 3., 4.], shape)?;
    let options = radix_pjrt::ExecuteOptions::default();
    let sum = exe.call_fn((a.clone(), b.clone()))?.to_vec::<f32>()?;
    ensure!(sum == [2., 4., 6., 8.], "tiny add gave {sum:?}");

    let mut report = Report::new("dispatch");
    let (mut call, mut execute) = (vec![], vec![]);
    // Alternate the two so that drift hits both alike.
    for _ in 0..samples + 5 {
        call.push(time_per_call(calls, || exe.call_fn((a.clone(), b.clone())).map(drop))? * 1e6);
        execute.push(
            time_per_call(calls, || {
                raw.execute(&[[a.raw(), b.raw()]], &options).map(drop)
            })? * 1e6,
        );
    }
    // The first samples warm caches and the thread pool.
    report.samples("radix Executable::call + wait", "us", &call[5..]);
    report.samples("PJRT execute + wait (floor)", "us", &execute[5..]);
    report.meta("calls_per_sample", json!(calls));
    Ok(report)
}

fn trace(runs: usize, write: Option<&std::path::Path>) -> Result<Report> {
    let cfg = llama_program::smollm2_config();
    let program = llama_program::prefill(&cfg)?;
    let text = program.stablehlo();
    if let Some(path) = write {
        std::fs::write(path, &text)?;
    }
    let mut report = Report::new("trace");
    report.meta("stablehlo_lines", json!(text.lines().count()));
    report.meta("stablehlo_bytes", json!(text.len()));
    report.meta("program", json!(llama_program::DESCRIPTION));
    let (mut total, mut traced, mut printed) = (vec![], vec![], vec![]);
    for _ in 0..runs {
        let t = Instant::now();
        let program = llama_program::prefill(&cfg)?;
        let t_trace = t.elapsed().as_secs_f64();
        let text = program.stablehlo();
        let t_total = t.elapsed().as_secs_f64();
        std::hint::black_box(text);
        total.push(t_total * 1e3);
        traced.push(t_trace * 1e3);
        printed.push((t_total - t_trace) * 1e3);
    }
    report.samples("radix trace + print", "ms", &total);
    report.samples("radix trace (with passes)", "ms", &traced);
    report.samples("radix print", "ms", &printed);
    Ok(report)
}

fn warm_start(compiles: usize, loads: usize) -> Result<Report> {
    let platform = Platform::cpu()?;
    let cfg = llama_program::smollm2_config();
    let mut report = Report::new("warm-start");
    report.meta("program", json!(llama_program::DESCRIPTION));
    let dirs = (0..compiles)
        .map(|_| tempfile::tempdir())
        .collect::<std::io::Result<Vec<_>>>()?;
    let code_to_exe = |dir: &std::path::Path, want: Origin| -> Result<(f64, f64)> {
        let t = Instant::now();
        let program = llama_program::prefill(&cfg)?;
        let traced = t.elapsed().as_secs_f64();
        let mut config = CompileConfig::new(&platform);
        config.cache = CacheMode::Dir(dir.to_path_buf());
        config.dump = None;
        let exe = radix::compile_program_with(&platform, program, &config)?;
        let total = t.elapsed().as_secs_f64();
        ensure!(
            exe.origin() == want,
            "expected {want:?}, got {:?}",
            exe.origin()
        );
        Ok((total, total - traced))
    };
    let (mut compile_total, mut compile_only) = (vec![], vec![]);
    for dir in &dirs {
        let (total, compile) = code_to_exe(dir.path(), Origin::Compiled)?;
        compile_total.push(total * 1e3);
        compile_only.push(compile * 1e3);
    }
    let (mut load_total, mut load_only) = (vec![], vec![]);
    for i in 0..loads {
        let (total, load) = code_to_exe(dirs[i % dirs.len()].path(), Origin::Cache)?;
        load_total.push(total * 1e3);
        load_only.push(load * 1e3);
    }
    // The parts of a cached start: the cache key (printing and hashing the
    // module) and PJRT's deserialize_and_load of the stored bytes.
    let program = llama_program::prefill(&cfg)?;
    let mut config = CompileConfig::new(&platform);
    config.cache = CacheMode::Dir(dirs[0].path().to_path_buf());
    let key = radix::cache_key(&platform, &program, &config)?;
    let payload = radix::ExecutableCache::new(dirs[0].path())
        .load(key)?
        .context("no cache entry")?
        .map_err(|e| anyhow::anyhow!("cache entry: {e}"))?;
    let (mut keys, mut deserialize) = (vec![], vec![]);
    for _ in 0..loads {
        let t = Instant::now();
        std::hint::black_box(radix::cache_key(&platform, &program, &config)?);
        keys.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        std::hint::black_box(platform.client().deserialize_and_load(&payload)?);
        deserialize.push(t.elapsed().as_secs_f64() * 1e3);
    }
    report.samples("radix cache key (print + hash)", "ms", &keys);
    report.samples("PJRT deserialize_and_load", "ms", &deserialize);
    let entry = std::fs::read_dir(dirs[0].path())?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .max()
        .unwrap_or(0);
    report.meta("cache_entry_bytes", json!(entry));
    report.samples(
        "radix first compile (trace + compile)",
        "ms",
        &compile_total,
    );
    report.samples("radix cached start (trace + load)", "ms", &load_total);
    report.samples("radix compile only", "ms", &compile_only);
    report.samples("radix cache load only", "ms", &load_only);
    Ok(report)
}

/// A text of exactly `n_tokens` tokens with `[CLS]` and `[SEP]`, the same
/// text as `bench/py/minilm.py` builds.
fn sentence(embedder: &Embedder, n_tokens: usize) -> Result<String> {
    let text = vec!["hello"; n_tokens - 2].join(" ");
    let n = embedder.tokenize(&text)?.len();
    ensure!(n == n_tokens, "{n} tokens, expected {n_tokens}");
    Ok(text)
}

fn minilm(
    label: &str,
    dir: &std::path::Path,
    samples: usize,
    only: Option<&str>,
    matrices: MatrixFormat,
) -> Result<Report> {
    let platform = Platform::cpu()?;
    let config = EmbedderConfig {
        matrices,
        ..EmbedderConfig::minilm()
    };
    let mut embedder = Embedder::new(&platform, dir, config)
        .with_context(|| format!("loading MiniLM from {}", dir.display()))?;
    let mut report = Report::new("minilm");
    report.meta("matrices", json!(format!("{matrices:?}")));
    report.meta("kernels", json!(radix_quant::Isa::best().name()));
    // 1×20 and 32×100 are no bucket: radix pads them to 32 and 128 tokens,
    // the others run them as they are. The same list as bench/peers/minilm.py.
    for (batch, len, calls) in [(1, 16, 10), (32, 128, 1), (1, 20, 10), (32, 100, 1)] {
        if only.is_some_and(|o| o != format!("{batch}x{len}")) {
            continue;
        }
        let text = sentence(&embedder, len)?;
        let texts = vec![text.as_str(); batch];
        let t = Instant::now();
        let first = embedder.embed(&texts)?;
        report.meta(
            &format!("first_call_s_{batch}x{len}"),
            json!(t.elapsed().as_secs_f64()),
        );
        report.meta(
            &format!("embedding_first4_{batch}x{len}"),
            json!(&first[0][..4]),
        );
        let mut rates = vec![];
        for _ in 0..samples {
            let per_call = time_per_call(calls, || embedder.embed(&texts).map(drop))?;
            rates.push(batch as f64 / per_call);
        }
        report.samples(&format!("{label} {batch}x{len}"), "sentences/s", &rates);
    }
    Ok(report)
}

fn smollm2(label: &str, args: &Smollm2Args) -> Result<Report> {
    let plan = match args.plan.as_str() {
        "one-program" => Plan::OneProgram,
        _ => Plan::PerBlock,
    };
    let matrices = match args.dtype.as_str() {
        "f32" => MatrixFormat::F32,
        "bf16" => MatrixFormat::BF16,
        "exact" => MatrixFormat::Exact,
        _ => MatrixFormat::AsStored,
    };
    let (prompt_len, n_decode) = (args.prompt, args.decode);
    let platform = Platform::cpu()?;
    let gguf = Gguf::open(&args.gguf)?;
    // f32 after dequantization; the tied embedding table is read whole by
    // the output projection, one row by the lookup.
    let weight_bytes: i64 = gguf
        .tensor_infos()
        .iter()
        .map(|t| t.dims.iter().product::<i64>() * 4)
        .sum();
    let t = Instant::now();
    // Any decoder radix runs (SmolLM2 by default; Gemma 3 files too).
    let mut engine =
        radix_models::engine::Engine::open(&platform, &args.gguf, prompt_len + n_decode, matrices)?
            .with_cache_type(match args.cache_type.as_str() {
                "f32" => CacheType::F32,
                "q8_0" => CacheType::Q8_0,
                _ => CacheType::F16,
            })?
            .with_plan(plan);
    let mut report = Report::new("smollm2");
    report.meta("plan", json!(format!("{plan:?}")));
    report.meta("matrices", json!(format!("{matrices:?}")));
    report.meta("kernels", json!(radix_quant::Isa::best().name()));
    report.meta("cache_type", json!(args.cache_type));
    report.meta("load_s", json!(t.elapsed().as_secs_f64()));
    report.meta("weight_bytes_f32", json!(weight_bytes));
    // The same ids as bench/py/smollm2.py: ordinary word ids.
    let prompt: Vec<u32> = (0..prompt_len as u32).map(|i| 1000 + 37 * i).collect();

    let t = Instant::now();
    let (_, mut cache) = engine.prefill(&prompt)?;
    engine.decode(0, &mut cache)?;
    report.meta(
        "first_prefill_and_decode_s",
        json!(t.elapsed().as_secs_f64()),
    );

    let mut rates = vec![];
    for _ in 0..args.prefills {
        let t = Instant::now();
        engine.prefill(&prompt)?;
        rates.push(prompt_len as f64 / t.elapsed().as_secs_f64());
    }
    report.samples(&format!("{label} prefill"), "tokens/s", &rates);

    let (mut steps, mut runs, mut ids) = (vec![], vec![], vec![]);
    for run in 0..args.decodes {
        let (mut logits, mut cache) = engine.prefill(&prompt)?;
        let start = Instant::now();
        for _ in 0..n_decode {
            let next = radix_models::sampling::Sampler::greedy().pick(&logits) as u32;
            if run == 0 {
                ids.push(next);
            }
            let t = Instant::now();
            logits = engine.decode(next, &mut cache)?;
            steps.push(1.0 / t.elapsed().as_secs_f64());
        }
        runs.push(n_decode as f64 / start.elapsed().as_secs_f64());
    }
    report.samples(&format!("{label} decode"), "tokens/s", &steps);
    report.samples(&format!("{label} decode (whole runs)"), "tokens/s", &runs);
    report.meta("greedy_ids_first16", json!(&ids[..ids.len().min(16)]));
    Ok(report)
}
