//! LoRA adapters against the real `peft` package, both ways, on the tiny
//! llama of `tests/fixtures/tiny/llama`: the adapter `peft` made
//! (`tests/fixtures/lora/make.py`) gives `peft`'s logits in radix, and an
//! adapter radix trained (`LoraTrainer`, its loss falling) and saved gives
//! radix's logits in `peft` (that script's `logits` command, run by a
//! Python with torch, transformers and peft installed from PyPI into a
//! venv under the target folder on first run). Adapters that do not fit
//! the model are errors naming what is wrong.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use radix::io::{Safetensors, TensorSource};
use radix::nn::MatrixFormat;
use radix::optim::AdamW;
use radix::testing::{Tol, assert_all_close};
use radix::{Buffer, DType, Shape, Tensor};
use radix_models::engine::{Engine, config_of, weight_store};
use radix_models::llama::Llama;
use radix_models::lora::{LoraConfig, LoraTrainer, initial_adapters, save_adapter};
use radix_models::sampling::Rng;
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn base_dir() -> PathBuf {
    fixtures().join("tiny/llama")
}

fn expected() -> Value {
    let path = fixtures().join("lora/expected.json");
    let text = std::fs::read_to_string(&path).expect("expected.json");
    serde_json::from_str(&text).expect("json")
}

fn ids() -> Vec<u32> {
    expected()["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// Rows of floats, flattened.
fn rows(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("rows")
        .iter()
        .flat_map(|r| r.as_array().expect("a row").iter())
        .map(|x| x.as_f64().expect("a float") as f32)
        .collect()
}

/// The logits at every position of `ids` (prefill of each prefix: the
/// last position's), flattened.
fn logits(engine: &mut Engine, ids: &[u32]) -> Vec<f32> {
    (1..=ids.len())
        .flat_map(|n| engine.prefill(&ids[..n]).expect("prefill").0)
        .collect()
}

/// f32 sums of at most 256 terms (the MLP's width) through 2 layers:
/// numpy's `allclose` with `atol` of twice the roundoff of such a sum of
/// the logits' size, and 4 units of roundoff relative.
fn tol(want: &[f32]) -> Tol {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    Tol::sum(DType::F32, 256, f64::from(scale))
}

fn open(adapter: Option<&Path>) -> radix_models::Result<Engine> {
    let platform = radix::testing::platform();
    match adapter {
        Some(a) => Engine::open_with_lora(&platform, &base_dir(), a, 16, MatrixFormat::F32),
        None => Engine::open(&platform, &base_dir(), 16, MatrixFormat::F32),
    }
}

#[test]
fn peft_adapter_gives_peft_logits() {
    let (want, want_base) = (
        rows(&expected()["logits"]),
        rows(&expected()["base_logits"]),
    );
    let base = logits(&mut open(None).expect("base"), &ids());
    assert_all_close("base", &base, &want_base, tol(&want_base));
    let got = logits(
        &mut open(Some(&fixtures().join("lora/adapter"))).expect("adapter"),
        &ids(),
    );
    assert_all_close("with the adapter", &got, &want, tol(&want));
    let moved = got.iter().zip(&base).map(|(a, b)| (a - b).abs());
    assert!(
        moved.fold(0f32, f32::max) > 0.1,
        "the adapter changes nothing"
    );
}

/// The same adapter folder with `edit` applied to its configuration or
/// its weights, in a fresh folder.
fn edited(name: &str, edit: impl FnOnce(&mut Value, &mut Vec<(String, Vec<i64>)>)) -> PathBuf {
    let src = fixtures().join("lora/adapter");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("lora-{name}"));
    std::fs::create_dir_all(&dir).expect("a folder");
    let text = std::fs::read_to_string(src.join("adapter_config.json")).expect("config");
    let mut config: Value = serde_json::from_str(&text).expect("json");
    let st = Safetensors::open(&src.join("adapter_model.safetensors")).expect("weights");
    let mut shapes: Vec<(String, Vec<i64>)> = st
        .names()
        .into_iter()
        .map(|n| {
            let dims = st.dims(&n).expect("dims");
            (n, dims)
        })
        .collect();
    edit(&mut config, &mut shapes);
    let tensors: Vec<(String, radix::io::HostTensor)> = shapes
        .into_iter()
        .map(|(n, dims)| {
            let count = dims.iter().product::<i64>() as usize;
            (
                n,
                radix::io::HostTensor::from_slice(&dims, &vec![0.5f32; count]),
            )
        })
        .collect();
    let named: Vec<(&str, &radix::io::HostTensor)> =
        tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    radix::io::safetensors::save(&dir.join("adapter_model.safetensors"), &named, &[])
        .expect("save");
    std::fs::write(dir.join("adapter_config.json"), config.to_string()).expect("config");
    dir
}

fn error_of(adapter: &Path) -> String {
    match open(Some(adapter)) {
        Ok(_) => panic!("{} loaded", adapter.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn adapters_that_do_not_fit_are_refused_by_name() {
    let unknown = edited("unknown-target", |c, _| {
        c["target_modules"] = serde_json::json!(["q_proj", "qkv_proj"]);
    });
    let err = error_of(&unknown);
    assert!(err.contains("qkv_proj"), "{err}");

    let key = "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight";
    let rank = edited("wrong-rank", |_, shapes| {
        let (_, dims) = shapes.iter_mut().find(|(n, _)| n == key).expect("the key");
        dims[0] = 8;
    });
    let err = error_of(&rank);
    assert!(
        err.contains(key) && err.contains("adapter_model.safetensors"),
        "{err}"
    );

    let extra = edited("untargeted", |c, _| {
        c["target_modules"] = serde_json::json!(["q_proj", "k_proj", "v_proj", "o_proj"]);
    });
    let err = error_of(&extra);
    assert!(
        err.contains("mlp.") && err.contains("adapter_model.safetensors"),
        "{err}"
    );

    let dora = edited("dora", |c, _| c["use_dora"] = Value::Bool(true));
    let err = error_of(&dora);
    assert!(
        err.contains("use_dora") && err.contains("adapter_config.json"),
        "{err}"
    );
}

fn loss(m: &Llama, ids: &Tensor) -> Tensor {
    m.next_token_loss(*ids)
}

/// An adapter of every projection, rank 4, alpha 8.
fn every_projection() -> LoraConfig {
    LoraConfig::every_projection(4, 8.0)
}

/// Adam at learning rate `lr`, without weight decay.
fn adam(lr: f64) -> AdamW {
    AdamW {
        lr,
        betas: (0.9, 0.999),
        eps: 1e-8,
        weight_decay: 0.0,
    }
}

/// `steps` steps of training an adapter of every projection of the tiny
/// llama at `base` (its matrices as `matrices` makes them) on the
/// fixture's ids, from the same first adapter each time: the losses and
/// the trainer.
fn train(
    base: &Path,
    matrices: MatrixFormat,
    steps: usize,
) -> (Vec<f32>, Llama, LoraTrainer<Llama, Tensor>) {
    let platform = radix::testing::platform();
    let cfg = config_of(base).expect("config");
    let mut model = Llama::new(&cfg)
        .with_lora(&every_projection())
        .expect("targets");
    let init = Box::new(initial_adapters(&model, &mut Rng::new(7)));
    let (_, store) = weight_store(base, init).expect("the base");
    radix::nn::set_matrix_formats(&mut model, &store, matrices);
    let weights = radix::nn::load_weights(&platform, &store, &model).expect("weights");
    let ids: Vec<i32> = ids().iter().map(|&t| t as i32).collect();
    let shape = Shape::tagged(DType::I32, &[("b", 1), ("s", ids.len() as i64)]);
    let opt = adam(1e-2);
    let mut trainer =
        LoraTrainer::new(&platform, &model, weights, &Tensor::param(shape), loss, opt)
            .expect("compile");
    let losses: Vec<f32> = (0..steps)
        .map(|_| {
            let batch = Buffer::from_slice(&platform, &ids, shape).expect("ids");
            trainer.step(batch).expect("step")
        })
        .collect();
    (losses, model, trainer)
}

/// Trains an adapter on the tiny llama for a few steps (its loss must
/// fall), saves it, and returns the folder.
fn train_adapter() -> PathBuf {
    let (losses, model, trainer) = train(&base_dir(), MatrixFormat::F32, 8);
    assert!(
        losses[7] < losses[0] - 0.1,
        "the loss did not fall: {losses:?}"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lora-trained");
    let weights = trainer.weights().expect("weights");
    let lora = every_projection();
    save_adapter(&dir, &model, &weights, &lora, "tests/fixtures/tiny/llama").expect("save");
    dir
}

/// Adapters train on a quantized base kept in its blocks (Q4_K_M: Q4_K,
/// Q5_0, Q6_K and Q8_0 matrices; products exact, gradients through the
/// blocks decoded in the graph) as on the same values in f32: the same
/// losses step after step, falling.
#[test]
fn adapters_train_on_a_quantized_base_as_on_its_f32_values() {
    let q4 = fixtures().join("tiny/llama.q4_k_m.gguf");
    let (blocks, model, _) = train(&q4, MatrixFormat::Exact, 6);
    let kept = radix::module::tensors(&model)
        .iter()
        .filter(|(_, t)| t.dtype() == DType::U8)
        .count();
    assert!(kept >= 14, "{kept} matrices in blocks");
    let (f32s, _, _) = train(&q4, MatrixFormat::F32, 6);
    assert!(
        blocks[5] < blocks[0] - 0.1,
        "the loss did not fall: {blocks:?}"
    );
    assert_all_close("losses", &blocks, &f32s, tol(&f32s));
}

/// The most pip may take to install torch, transformers and peft, and the
/// script's whole run.
const PIP_DEADLINE: Duration = Duration::from_secs(1500);
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);

/// `cmd`'s output, or a failure if it runs past `deadline` (it is killed).
fn output_within(cmd: &mut Command, deadline: Duration) -> (bool, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let (mut out, mut err) = (
        child.stdout.take().expect("out"),
        child.stderr.take().expect("err"),
    );
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).ok();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).ok();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("{cmd:?} ran past {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = reader.join().expect("stdout");
    let err = err_reader.join().expect("stderr");
    (status.success(), out, err)
}

/// The pins of `make.py` (and of `bench/requirements.txt`).
const PINS: [&str; 3] = ["torch==2.15.0", "transformers==5.24.0", "peft==0.21.0"];

/// A venv's python that imports torch, transformers and peft at the pinned
/// versions, made on first use (a failure when pip cannot install them).
fn python_with_peft() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("peft-venv");
    let python = venv.join("bin/python");
    let check = "import torch, transformers, peft; \
                 print(torch.__version__.split('+')[0], transformers.__version__, peft.__version__)";
    let want = "2.15.0 5.24.0 0.21.0";
    let has = || {
        python.is_file()
            && output_within(Command::new(&python).args(["-c", check]), SCRIPT_DEADLINE)
                .1
                .trim()
                == want
    };
    if has() {
        return python;
    }
    let (made, _, err) = output_within(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        SCRIPT_DEADLINE,
    );
    assert!(made, "python3 -m venv failed: {err}");
    let (ok, _, err) = output_within(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--timeout", "30", "--retries", "2"])
            .args(PINS),
        PIP_DEADLINE,
    );
    assert!(
        ok,
        "this test needs torch, transformers and peft from PyPI, and pip could not \
         install them (is PyPI reachable?):\n{err}"
    );
    assert!(
        has(),
        "torch, transformers and peft installed but not importable"
    );
    python
}

#[test]
fn adapter_radix_trained_loads_in_peft_with_the_same_logits() {
    let dir = train_adapter();
    let got = logits(&mut open(Some(&dir)).expect("the saved adapter"), &ids());
    let python = python_with_peft();
    let script = fixtures().join("lora/make.py");
    let (ok, out, err) = output_within(
        Command::new(python).arg(&script).arg("logits").arg(&dir),
        SCRIPT_DEADLINE,
    );
    assert!(ok, "make.py logits failed:\n{err}");
    let want = rows(&serde_json::from_str(&out).expect("the logits as JSON"));
    assert_all_close("radix's adapter in peft", &got, &want, tol(&want));
    let base = rows(&expected()["base_logits"]);
    let moved = got.iter().zip(&base).map(|(a, b)| (a - b).abs());
    assert!(
        moved.fold(0f32, f32::max) > 0.1,
        "the trained adapter changes nothing"
    );
}

/// SmolLM2's Q4_1 base, kept in its blocks, with adapters on every
/// projection trained for one pass over the story of
/// `examples/data/lighthouse.txt` (as `examples/finetune_lora.rs` trains
/// them, one epoch): the loss falls, and with the saved adapter the model
/// predicts the story better than the base (the mean negative
/// log-likelihood of its first 64 tokens) and continues its opening words
/// otherwise.
#[test]
fn smollm2_adapter_learns_the_story() {
    let gguf = radix_models::packages::smollm2_gguf().expect("SmolLM2");
    let tokenizer = radix_text::Tokenizer::from_gguf(&radix::io::Gguf::open(&gguf).expect("gguf"))
        .expect("tokenizer");
    let text = include_str!("../examples/data/lighthouse.txt");
    let text = tokenizer.encode(text).expect("ids");
    let platform = radix::testing::platform();
    let cfg = config_of(&gguf).expect("config");
    let lora = LoraConfig {
        rank: 8,
        alpha: 16.0,
        ..every_projection()
    };
    let mut model = Llama::new(&cfg).with_lora(&lora).expect("targets");
    let init = Box::new(initial_adapters(&model, &mut Rng::new(0)));
    let (_, store) = weight_store(&gguf, init).expect("the base");
    radix::nn::set_matrix_formats(&mut model, &store, MatrixFormat::Exact);
    let weights = radix::nn::load_weights(&platform, &store, &model).expect("weights");
    let shape = Shape::tagged(DType::I32, &[("b", 1), ("s", 65)]);
    let opt = adam(2e-3);
    let mut trainer =
        LoraTrainer::new(&platform, &model, weights, &Tensor::param(shape), loss, opt)
            .expect("compile");
    let losses: Vec<f32> = (0..=text.len() - 65)
        .step_by(64)
        .map(|at| {
            let ids: Vec<i32> = text[at..at + 65].iter().map(|&t| t as i32).collect();
            let batch = Buffer::from_slice(&platform, &ids, shape).expect("ids");
            trainer.step(batch).expect("step")
        })
        .collect();
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    let n = losses.len();
    assert!(
        mean(&losses[n - 4..]) < mean(&losses[..4]) - 0.3,
        "the loss did not fall: {losses:?}"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lora-smollm2");
    let weights = trainer.weights().expect("weights");
    save_adapter(
        &dir,
        &model,
        &weights,
        &lora,
        "HuggingFaceTB/SmolLM2-135M-Instruct",
    )
    .expect("save");
    let mut base = Engine::open(&platform, &gguf, 128, MatrixFormat::Exact).expect("base");
    let mut adapted =
        Engine::open_with_lora(&platform, &gguf, &dir, 128, MatrixFormat::Exact).expect("adapted");
    let nll = |r: &mut Engine| mean(&r.next_token_nll(&text[..64]).expect("nll"));
    let (base_nll, adapted_nll) = (nll(&mut base), nll(&mut adapted));
    assert!(
        adapted_nll < base_nll - 0.3,
        "{adapted_nll} vs the base's {base_nll}"
    );
    let prompt = &text[..8];
    let greedy = |r: &mut Engine| {
        r.generate(prompt, 16, &mut radix_models::sampling::Sampler::greedy())
            .expect("generate")
    };
    assert_ne!(greedy(&mut base), greedy(&mut adapted));
}
