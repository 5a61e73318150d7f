//! A token's values do not depend on the tokens that share its step: the
//! RMS norm (`radix.rms_norm`) and the rotary embedding (`radix.sin_cos`,
//! `radix.rotate`) give a token's row the same bits alone and in steps of
//! up to 16 sequences of up to 16 tokens. XLA's own fusions of the same
//! formulas did not (8 rows or more summed a row's squares in another
//! order; steps of several tokens per sequence rotated with other last
//! bits), and with 8-bit products those last bits moved activations to
//! other codes, so a prompt run in a batch's step answered otherwise than
//! alone. Each kernel is also held against its fallback (the formula in
//! ops) within f32 tolerance.

mod blocks;

use blocks::Rng;
use radix::nn::{RmsNorm, RopeLayout, Rotary};
use radix::testing::{Tol, assert_all_close, run_program_with, trace_fn};
use radix::{CustomCallMode, DType, Literal, Module, Shape, Tensor};

/// Steps as (sequences, tokens each): alone first.
const STEPS: [(i64, i64); 9] = [
    (1, 1),
    (2, 1),
    (4, 1),
    (8, 1),
    (16, 1),
    (1, 8),
    (3, 5),
    (16, 8),
    (1, 16),
];

fn literal(dtype: DType, axes: &[(&str, i64)], bytes: Vec<u8>) -> Literal {
    Literal::from_bytes(Shape::tagged(dtype, axes), &bytes)
}

fn f32s(values: &[f32], axes: &[(&str, i64)]) -> Literal {
    literal(
        DType::F32,
        axes,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

fn i32s(values: &[i32], axes: &[(&str, i64)]) -> Literal {
    literal(
        DType::I32,
        axes,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

fn random(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| 2.0 * rng.unit()).collect()
}

/// `run(b, s, mode)` runs a step of `b` sequences of `s` tokens whose
/// first token is the same in every step: its first `row` outputs have
/// the same bits in every step of [`STEPS`], and the kernels' outputs are
/// the fallback's within f32 tolerance.
fn same_bits_in_every_step(
    what: &str,
    row: usize,
    run: impl Fn(i64, i64, CustomCallMode) -> Vec<f32>,
) {
    let alone: Vec<u32> = run(1, 1, CustomCallMode::Native)[..row]
        .iter()
        .map(|v| v.to_bits())
        .collect();
    for (b, s) in STEPS {
        let got = run(b, s, CustomCallMode::Native);
        let bits: Vec<u32> = got[..row].iter().map(|v| v.to_bits()).collect();
        let differ = bits.iter().zip(&alone).filter(|(a, b)| a != b).count();
        assert_eq!(
            differ, 0,
            "{what}: {differ} of {row} values differ in a step of {b}×{s}"
        );
        let fallback = run(b, s, CustomCallMode::Fallback);
        assert_all_close(
            &format!("{what}: kernel vs fallback, {b}×{s}"),
            &got,
            &fallback,
            Tol::F32,
        );
    }
}

#[test]
fn rms_norm_gives_a_token_the_same_bits_in_any_step() {
    let d = 576;
    let mut rng = Rng(11);
    let (row, w) = (random(&mut rng, d), random(&mut rng, d));
    same_bits_in_every_step("rms norm", d, |b, s, mode| {
        let mut x = random(&mut rng.clone(), (b * s) as usize * d);
        x[..d].copy_from_slice(&row);
        let inputs = [
            f32s(&x, &[("b", b), ("s", s), ("d", d as i64)]),
            f32s(&w, &[("d", d as i64)]),
        ];
        let program = trace_fn(&inputs, |t: &[Tensor]| {
            let mut norm = RmsNorm::new(("d", d as i64), 1e-5);
            norm.visit_mut(&mut String::new(), &mut |_, p| *p = t[1]);
            norm.forward(t[0])
        })
        .expect("trace");
        run_program_with(program, &inputs, mode).expect("run")[0].to_vec::<f32>()
    });
}

#[test]
fn rotary_gives_a_token_the_same_bits_in_any_step() {
    let (h, hd) = (9, 64);
    let row_len = (h * hd) as usize;
    for layout in [RopeLayout::AdjacentPair, RopeLayout::HalfSplit] {
        let mut rng = Rng(12);
        let row = random(&mut rng, row_len);
        same_bits_in_every_step(&format!("rotary {layout:?}"), row_len, |b, s, mode| {
            let n = (b * s) as usize;
            let mut x = random(&mut rng.clone(), n * row_len);
            x[..row_len].copy_from_slice(&row);
            // The first token at position 19, the others elsewhere.
            let pos: Vec<i32> = (0..n as i32)
                .map(|i| if i == 0 { 19 } else { 3 + i })
                .collect();
            let inputs = [
                f32s(&x, &[("b", b), ("s", s), ("h", h), ("hd", hd)]),
                i32s(&pos, &[("b", b), ("s", s)]),
            ];
            let program = trace_fn(&inputs, |t: &[Tensor]| {
                Rotary::new(hd, 100000.0, layout).forward(t[0], t[1])
            })
            .expect("trace");
            run_program_with(program, &inputs, mode).expect("run")[0].to_vec::<f32>()
        });
    }
}
