//! Layer tests against hand-computed numbers, through the CPU plugin and the
//! reference interpreter.

use crate::nn::*;
use crate::testing::{Tol, check};
use crate::{DType, Literal, Module, Shape, Tensor};

/// A literal of f32 `values` with tagged axes.
fn lit(axes: &[(&str, i64)], values: &[f64]) -> Literal {
    Literal::new(Shape::tagged(DType::F32, axes), values.to_vec())
}

/// A literal of i32 `values` with tagged axes.
fn ids(axes: &[(&str, i64)], values: &[f64]) -> Literal {
    Literal::new(Shape::tagged(DType::I32, axes), values.to_vec())
}

/// `layer` with its parameters replaced by the traced `args` (in ABI order),
/// keeping the parameters' tags.
fn bind<M: Module>(mut layer: M, args: &[Tensor]) -> M {
    let mut i = 0;
    layer.visit_mut(&mut String::new(), &mut |_, t| {
        let tags: Vec<&str> = t
            .shape()
            .tags()
            .iter()
            .map(|t| t.map_or("", |t| t.as_str()))
            .collect();
        *t = args[i].with_tags(&tags);
        i += 1;
    });
    layer
}

#[test]
fn linear_with_bias() {
    let x = lit(&[("s", 2), ("d", 3)], &[1., 2., 3., 4., 5., 6.]);
    let w = lit(&[("f", 2), ("d", 3)], &[1., 0., -1., 0.5, 0.5, 0.5]);
    let b = lit(&[("f", 2)], &[1., -1.]);
    let got = check(
        &[x, w, b],
        |t| bind(Linear::new(("d", 3), ("f", 2)).with_bias(), &t[1..]).forward(t[0]),
        &[-1., 2., -1., 6.5],
        Tol::F32,
    );
    assert_eq!(
        got.shape(),
        Shape::tagged(DType::F32, &[("s", 2), ("f", 2)])
    );
}

#[test]
fn linear_same_tag_in_and_out() {
    let x = lit(&[("d", 2)], &[1., 2.]);
    let w = lit(&[("o", 2), ("d", 2)], &[0., 1., 1., 0.]);
    check(
        &[x, w],
        |t| bind(Linear::new(("d", 2), ("d", 2)), &t[1..]).forward(t[0]),
        &[2., 1.],
        Tol::EXACT,
    );
}

#[test]
fn embedding_gathers_and_unembeds() {
    let table = lit(&[("voc", 3), ("d", 2)], &[0., 1., 2., 3., 4., 5.]);
    let i = ids(&[("s", 3)], &[2., 0., 2.]);
    check(
        &[i, table.clone()],
        |t| bind(Embedding::new(3, ("d", 2)), &t[1..]).forward(t[0]),
        &[4., 5., 0., 1., 4., 5.],
        Tol::EXACT,
    );
    let x = lit(&[("d", 2)], &[1., -1.]);
    check(
        &[x, table],
        |t| bind(Embedding::new(3, ("d", 2)), &t[1..]).unembed(t[0], "d"),
        &[-1., -1., -1.],
        Tol::EXACT,
    );
}

#[test]
fn rms_norm() {
    let x = lit(&[("s", 1), ("d", 2)], &[3., 4.]);
    let w = lit(&[("d", 2)], &[1., 2.]);
    check(
        &[x, w],
        |t| bind(RmsNorm::new(("d", 2), 0.0), &t[1..]).forward(t[0]),
        &[0.848_528_1, 2.262_741_7],
        Tol::F32,
    );
}

#[test]
fn layer_norm() {
    let x = lit(&[("d", 4)], &[1., 2., 3., 4.]);
    let w = lit(&[("d", 4)], &[1., 1., 1., 1.]);
    let b = lit(&[("d", 4)], &[0., 0., 0., 1.]);
    check(
        &[x, w, b],
        |t| bind(LayerNorm::new(("d", 4), 0.0), &t[1..]).forward(t[0]),
        &[-1.341_640_8, -0.447_213_6, 0.447_213_6, 2.341_640_8],
        Tol::F32,
    );
}

#[test]
fn gated_mlp() {
    // gate = up = x (identity), down = identity: silu(x) * x.
    let x = lit(&[("d", 2)], &[1., -2.]);
    let eye = lit(&[("o", 2), ("i", 2)], &[1., 0., 0., 1.]);
    let silu = |v: f64| v / (1.0 + (-v).exp());
    check(
        &[x, eye.clone(), eye.clone(), eye],
        |t| bind(GatedMlp::new(("d", 2), 2), &t[1..]).forward(t[0]),
        &[silu(1.0), silu(-2.0) * -2.0],
        Tol::F32,
    );
}

#[test]
fn rotary_both_layouts() {
    // Positions 0 and 1; one head of size 4; theta 100: frequencies 1 and 0.1.
    let x = lit(
        &[("s", 2), ("h", 1), ("hd", 4)],
        &[1., 0., 1., 0., 1., 0., 1., 0.],
    );
    let pos = ids(&[("s", 2)], &[0., 1.]);
    let (c1, s1, c01, s01) = (1f64.cos(), 1f64.sin(), 0.1f64.cos(), 0.1f64.sin());
    let rope = Rotary::new(4, 100.0, RopeLayout::AdjacentPair);
    check(
        &[x.clone(), pos.clone()],
        |t| rope.forward(t[0], t[1]),
        &[1., 0., 1., 0., c1, s1, c01, s01],
        Tol::F32,
    );
    let rope = Rotary::new(4, 100.0, RopeLayout::HalfSplit);
    check(
        &[x, pos],
        |t| rope.forward(t[0], t[1]),
        &[1., 0., 1., 0., c1 - s1, 0., s1 + c1, 0.],
        Tol::F32,
    );
}

#[test]
fn rotary_scalings() {
    // One head of size 4 at position 1, theta 100: frequencies 1 and 0.1
    // before scaling; each case gives the scaled ones and the factor on
    // cosines and sines, computed by hand as transformers does.
    let x = lit(&[("s", 1), ("h", 1), ("hd", 4)], &[1., 0., 1., 0.]);
    let pos = ids(&[("s", 1)], &[1.]);
    let smooth = (8.0 / (2.0 * std::f64::consts::PI) - 1.0) / 3.0;
    let yarn_a = 0.1 * 2f64.ln() + 1.0;
    for (scaling, f0, f1, a) in [
        (RopeScaling::Linear { factor: 2.0 }, 0.5, 0.05f64, 1.0),
        (RopeScaling::Factors(vec![1.0, 2.0]), 1.0, 0.05, 1.0),
        // Wavelength 2 pi lies between 8 / 4 and 8 / 1: blended; 20 pi is
        // longer than 8: divided by 4.
        (
            RopeScaling::Llama3 {
                factor: 4.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original: 8.0,
            },
            (1.0 - smooth) / 4.0 + smooth,
            0.025,
            1.0,
        ),
        // Over 8 positions pair 0 turns more than beta_slow = 1 times: kept;
        // pair 1 less: divided by 2.
        (
            RopeScaling::Yarn {
                factor: 2.0,
                original: 8.0,
                beta_fast: 32.0,
                beta_slow: 1.0,
                attention_factor: RopeScaling::yarn_attention_factor(2.0),
            },
            1.0,
            0.05,
            yarn_a,
        ),
    ] {
        let rope = Rotary::scaled(4, 100.0, RopeLayout::AdjacentPair, &scaling);
        let want = [a * f0.cos(), a * f0.sin(), a * f1.cos(), a * f1.sin()];
        check(
            &[x.clone(), pos.clone()],
            |t| rope.forward(t[0], t[1]),
            &want,
            Tol::F32,
        );
    }
}

#[test]
fn grouped_attention_with_and_without_causal_mask() {
    // Two query heads share one key/value head; keys 0 and ln 3.
    let q = lit(&[("q", 1), ("h", 2), ("hd", 1)], &[1., 0.]);
    let k = lit(&[("k", 2), ("h", 1), ("hd", 1)], &[0., 3f64.ln()]);
    let v = lit(&[("k", 2), ("h", 1), ("hd", 1)], &[1., 5.]);
    check(
        &[q.clone(), k.clone(), v.clone()],
        |t| attention(t[0], t[1], t[2], None),
        &[4., 3.],
        Tol::F32,
    );
    let qp = ids(&[("q", 1)], &[0.]);
    let kp = ids(&[("k", 2)], &[0., 1.]);
    check(
        &[q, k, v, qp, kp],
        |t| attention(t[0], t[1], t[2], Some(causal_mask(t[3], t[4]))),
        &[1., 1.],
        Tol::F32,
    );
}

#[test]
fn padding_mask_hides_keys_and_fully_masked_rows_stay_finite() {
    let q = lit(&[("b", 2), ("q", 1), ("h", 1), ("hd", 1)], &[1., 1.]);
    let k = lit(
        &[("b", 2), ("k", 2), ("h", 1), ("hd", 1)],
        &[0., 0., 0., 0.],
    );
    let v = lit(
        &[("b", 2), ("k", 2), ("h", 1), ("hd", 1)],
        &[1., 5., 1., 5.],
    );
    let valid = ids(&[("b", 2), ("k", 2)], &[0., 1., 0., 0.]);
    check(
        &[q, k, v, valid],
        |t| attention(t[0], t[1], t[2], Some(padding_mask(t[3]))),
        &[5., 3.],
        Tol::F32,
    );
}

#[test]
fn kv_cache_write_at_start() {
    let cache = lit(&[("b", 1), ("k", 3), ("h", 1), ("hd", 1)], &[1., 2., 3.]);
    let new = lit(&[("b", 1), ("k", 1), ("h", 1), ("hd", 1)], &[7.]);
    let start = ids(&[], &[1.]);
    check(
        &[cache, new, start],
        |t| KvCache { k: t[0], v: t[0] }.write(t[2], t[1], t[1]).k,
        &[1., 7., 3.],
        Tol::EXACT,
    );
}

#[test]
fn kv_cache_write_a_start_per_row() {
    let cache = lit(
        &[("b", 2), ("k", 3), ("h", 1), ("hd", 1)],
        &[1., 2., 3., 4., 5., 6.],
    );
    let new = lit(&[("b", 2), ("k", 1), ("h", 1), ("hd", 1)], &[7., 8.]);
    let starts = ids(&[("b", 2)], &[2., 0.]);
    check(
        &[cache, new, starts],
        |t| KvCache { k: t[0], v: t[0] }.write(t[2], t[1], t[1]).k,
        &[1., 2., 7., 8., 5., 6.],
        Tol::EXACT,
    );
}

#[test]
fn kv_cache_write_a_start_per_row_into_the_first_rows() {
    let cache = lit(
        &[("b", 3), ("k", 2), ("h", 1), ("hd", 1)],
        &[1., 2., 3., 4., 5., 6.],
    );
    let new = lit(&[("b", 2), ("k", 1), ("h", 1), ("hd", 1)], &[7., 8.]);
    let starts = ids(&[("b", 2)], &[1., 0.]);
    check(
        &[cache, new, starts],
        |t| KvCache { k: t[0], v: t[0] }.write(t[2], t[1], t[1]).k,
        &[1., 7., 8., 4., 5., 6.],
        Tol::EXACT,
    );
}

/// Several keys per row from each row's own start; those past the
/// capacity are dropped, not written into the next row.
#[test]
fn kv_cache_write_several_per_row_drops_those_past_the_capacity() {
    let cache = lit(
        &[("b", 2), ("k", 4), ("h", 1), ("hd", 1)],
        &[1., 2., 3., 4., 5., 6., 7., 8.],
    );
    let new = lit(
        &[("b", 2), ("k", 3), ("h", 1), ("hd", 1)],
        &[10., 11., 12., 20., 21., 22.],
    );
    // Row 0's third key would land on row 1's first position, which row 1
    // keeps.
    let starts = ids(&[("b", 2)], &[2., 1.]);
    check(
        &[cache, new, starts],
        |t| KvCache { k: t[0], v: t[0] }.write(t[2], t[1], t[1]).k,
        &[1., 2., 10., 11., 5., 20., 21., 22.],
        Tol::EXACT,
    );
}

/// The fallbacks of radix's kernels (what runs where the kernel cannot) are
/// located at the line that called the layer, as the layer's other nodes.
#[test]
fn the_fallbacks_of_the_kernels_are_at_the_users_line() {
    use crate::ir::Op;
    let heads = [("b", 1), ("q", 3), ("h", 2), ("hd", 4)];
    let q = lit(&heads, &[0.5; 24]);
    let k = lit(&[("b", 1), ("k", 3), ("h", 2), ("hd", 4)], &[0.25; 24]);
    let pos = ids(&[("b", 1), ("q", 3)], &[0., 1., 2.]);
    let lengths = ids(&[("b", 1)], &[2.]);
    let rope = Rotary::new(4, 100.0, RopeLayout::AdjacentPair);
    let program = crate::testing::trace_fn(&[q, k, pos, lengths], |t| {
        let cached = cached_attention(t[0], t[2], KvCache { k: t[1], v: t[1] }, None);
        let padded = padded_attention(t[0], t[1], t[1], t[3]);
        rope.forward(cached + padded, t[2])
    })
    .unwrap();
    let mut fallbacks = 0;
    for node in &program.function().nodes {
        let Op::CustomCall(site) = &node.op else {
            continue;
        };
        let f = site
            .fallback
            .as_ref()
            .expect("radix's kernels declare fallbacks");
        fallbacks += 1;
        for loc in &f.locs {
            assert!(
                loc.file().ends_with("nn/tests.rs"),
                "{}: {loc}",
                site.call.name()
            );
        }
    }
    assert!(fallbacks >= 3, "{fallbacks} kernels");
}
