//! `radix::optim`: a training step (loss, `radix::grad`, update) compiled
//! as one executable whose parameters and optimizer state are donated and
//! updated in place, five steps of SGD with momentum and of AdamW equal to
//! PyTorch's (`tests/fixtures/optim/make.py`), and a mixed-precision AdamW
//! step (bf16 forward and backward, f32 masters) against an f64 reference
//! computed here from bf16-rounded forward values.

use radix::optim::{
    AdamW, AdamWState, AdamWStateWith, MixedPrecision, Precision, Sgd, SgdState, donate,
    zeros as zero_buffers,
};
use radix::testing::{Tol, compare, platform};
use radix::{Buffer, Bufferized, DType, Error, Module, Shape, Tensor};

#[derive(Module, Clone)]
struct Params {
    w: Tensor,
    b: Tensor,
}

fn loss(p: &Params, data: &(Tensor, Tensor)) -> Tensor {
    let (x, c) = *data;
    let y = x.dot(p.w, "i");
    ((y + p.b.broadcast(y.shape())).tanh() * c).sum(["s", "o"])
}

fn reference() -> serde_json::Value {
    serde_json::from_str(include_str!("fixtures/optim/reference.json")).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn shapes() -> (Shape, Shape, Shape, Shape) {
    (
        Shape::tagged(DType::F32, &[("i", 3), ("o", 4)]),
        Shape::tagged(DType::F32, &[("o", 4)]),
        Shape::tagged(DType::F32, &[("s", 6), ("i", 3)]),
        Shape::tagged(DType::F32, &[("s", 6), ("o", 4)]),
    )
}

/// The initial parameters and the data as buffers.
fn start(r: &serde_json::Value) -> (Bufferized<Params>, (Buffer, Buffer)) {
    let p = platform();
    let (ws, bs, xs, cs) = shapes();
    let buf = |k: &str, s: Shape| Buffer::from_slice(&p, &floats(&r[k]), s).unwrap();
    (
        ParamsWith {
            w: buf("w0", ws),
            b: buf("b0", bs),
        },
        (buf("x", xs), buf("c", cs)),
    )
}

/// Checks step `k`'s loss and parameters against PyTorch's.
fn check_step(r: &serde_json::Value, k: usize, loss: &Buffer, p: &Bufferized<Params>) {
    // Five f32 steps; tanh and the update's sqrt differ in the last bits,
    // and Adam's `m / sqrt(v)` divides a gradient's rounding by the
    // gradient's own size: 1e-5 absolute is 2e-4 of a step of lr 0.05.
    let tol = Tol {
        rel: 1e-5,
        abs: 1e-5,
    };
    let want = &r[k];
    let got = |b: &Buffer| -> Vec<f64> {
        b.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .collect()
    };
    let f64s =
        |v: &serde_json::Value| -> Vec<f64> { floats(v).iter().map(|&v| v as f64).collect() };
    compare(&got(loss), &[want["loss"].as_f64().unwrap()], tol).unwrap();
    compare(&got(&p.w), &f64s(&want["w"]), tol).unwrap_or_else(|m| panic!("step {k} w: {m}"));
    compare(&got(&p.b), &f64s(&want["b"]), tol).unwrap_or_else(|m| panic!("step {k} b: {m}"));
}

fn params() -> Params {
    let (ws, bs, _, _) = shapes();
    Params {
        w: Tensor::param(ws),
        b: Tensor::param(bs),
    }
}

fn data() -> (Tensor, Tensor) {
    let (_, _, xs, cs) = shapes();
    (Tensor::param(xs), Tensor::param(cs))
}

#[test]
fn sgd_with_momentum_steps_as_pytorch() {
    let r = reference();
    let opt = Sgd {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 0.01,
    };
    let p = params();
    let inputs = (p.clone(), SgdState::params(&p), data());
    let step = radix::compile_fn(&platform(), &inputs, |(p, s, d)| {
        let (l, g) = radix::value_and_grad(loss, &p, &d);
        let (p2, s2) = opt.update(&p, &g, &s);
        (l, donate(&p2, &p), donate(&s2, &s))
    })
    .unwrap();
    let (mut params, data) = start(&r);
    let mut state = zero_buffers(&platform(), &SgdState::params(&p)).unwrap();
    for k in 0..5 {
        let old_w = params.w.clone();
        let (l, p2, s2) = step
            .call_fn((params, state, (data.0.clone(), data.1.clone())))
            .unwrap();
        check_step(&r["sgd"], k, &l, &p2);
        // The old parameters were donated: the step wrote into them.
        assert!(old_w.to_vec::<f32>().is_err());
        (params, state) = (p2, s2);
    }
}

#[test]
fn adamw_steps_as_pytorch() {
    let r = reference();
    let opt = AdamW {
        lr: 0.05,
        betas: (0.9, 0.999),
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let p = params();
    let inputs = (p.clone(), AdamWState::params(&p), data());
    let step = radix::compile_fn(&platform(), &inputs, |(p, s, d)| {
        let (l, g) = radix::value_and_grad(loss, &p, &d);
        let (p2, s2) = opt.update(&p, &g, &s);
        (l, donate(&p2, &p), donate(&s2, &s))
    })
    .unwrap();
    let (mut params, data) = start(&r);
    let mut state = zero_buffers(&platform(), &AdamWState::params(&p)).unwrap();
    for k in 0..5 {
        let spent = state.m.w.clone();
        let (l, p2, s2) = step
            .call_fn((params, state, (data.0.clone(), data.1.clone())))
            .unwrap();
        check_step(&r["adamw"], k, &l, &p2);
        (params, state) = (p2, s2);
        // Passing a donated buffer again is an error naming it.
        if k == 0 {
            let res = step.call_fn((
                params.clone(),
                AdamWStateWith {
                    step: state.step.clone(),
                    m: ParamsWith {
                        w: spent.clone(),
                        b: state.m.b.clone(),
                    },
                    v: state.v.clone(),
                },
                (data.0.clone(), data.1.clone()),
            ));
            assert!(matches!(res, Err(Error::Donated { .. })));
        }
    }
    assert_eq!(state.step.to_vec::<f32>().unwrap(), [5.0]);
}

/// The AdamW of the mixed-precision tests.
const MIXED_ADAMW: AdamW = AdamW {
    lr: 0.05,
    betas: (0.9, 0.999),
    eps: 1e-8,
    weight_decay: 0.1,
};

/// bf16's unit roundoff: 8 significant bits, rounding to nearest is off by
/// at most 2^-8 of the value.
const BF16_U: f64 = 1.0 / 256.0;

/// `x` rounded to bf16 (to nearest, ties to even), as f64.
fn bf16(x: f64) -> f64 {
    let b = (x as f32).to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(r) as f64
}

/// What one mixed-precision step gives, as f64: the loss, the gradient
/// (`w` then `b`), the new parameters and the new moments.
struct MixedStep {
    loss: f64,
    grad: Vec<f64>,
    params: Vec<f64>,
    m: Vec<f64>,
    v: Vec<f64>,
}

/// The AdamW state of the mixed-precision tests: 3 steps taken, moments
/// far from zero, so the update depends on the gradient's size (from a
/// zero state Adam's first step is `lr * sign(g)`).
fn mixed_state() -> (f32, Vec<f32>, Vec<f32>) {
    let m = (0..16).map(|k| 0.3 * ((k as f32) * 0.7).sin()).collect();
    let v = (0..16).map(|k| 0.05 + 0.02 * (k % 5) as f32).collect();
    (3.0, m, v)
}

/// One step of `loss` in `precision` with [`MIXED_ADAMW`] from the
/// reference's parameters and [`mixed_state`], on the plugin; also checks
/// that the masters and the state stay f32.
fn mixed_step(precision: Precision) -> MixedStep {
    let r = reference();
    let pl = platform();
    let p = params();
    let inputs = (p.clone(), AdamWState::params(&p), data());
    let step = radix::compile_fn(&pl, &inputs, |(p, s, d)| {
        let (l, g) = precision.value_and_grad(loss, &p, &d);
        let (p2, s2) = MIXED_ADAMW.update(&p, &g, &s);
        (l, g, donate(&p2, &p), donate(&s2, &s))
    })
    .unwrap();
    let (params, data) = start(&r);
    let (ws, bs, _, _) = shapes();
    let (t, m, v) = mixed_state();
    let tree = |xs: &[f32]| ParamsWith {
        w: Buffer::from_slice(&pl, &xs[..12], ws).unwrap(),
        b: Buffer::from_slice(&pl, &xs[12..], bs).unwrap(),
    };
    let state = AdamWStateWith {
        step: Buffer::from_slice(&pl, &[t], Shape::scalar(DType::F32)).unwrap(),
        m: tree(&m),
        v: tree(&v),
    };
    let (l, g, p2, s2) = step.call_fn((params, state, data)).unwrap();
    let f32s = |b: &[&Buffer]| -> Vec<f64> {
        b.iter()
            .flat_map(|b| {
                assert_eq!(b.shape().dtype(), DType::F32, "{}", b.shape());
                b.to_vec::<f32>().unwrap()
            })
            .map(f64::from)
            .collect()
    };
    assert_eq!(f32s(&[&s2.step]), [4.0]);
    MixedStep {
        loss: f32s(&[&l])[0],
        grad: f32s(&[&g.w, &g.b]),
        params: f32s(&[&p2.w, &p2.b]),
        m: f32s(&[&s2.m.w, &s2.m.b]),
        v: f32s(&[&s2.v.w, &s2.v.b]),
    }
}

/// Checks `got` against `want`, each within `k * BF16_U` of the sum of the
/// magnitudes of the terms that made it (`scale`): the error bound of `k`
/// bf16 roundings of partial results.
fn check_bf16(what: &str, got: &[f64], want: &[f64], scale: &[f64], k: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for i in 0..got.len() {
        let bound = k * BF16_U * scale[i];
        assert!(
            (got[i] - want[i]).abs() <= bound,
            "{what}[{i}]: {} against the reference {} (bound {bound:e})\ngot {got:?}\nwant {want:?}",
            got[i],
            want[i]
        );
    }
}

/// A mixed-precision AdamW step: the loss and the gradient equal an f64
/// reference computed from bf16-rounded inputs and forward values, within
/// bf16 roundings counted per reduction; the update is applied in f32 to
/// the f32 masters (to f32 precision, from the step's own gradient).
#[test]
fn a_mixed_precision_adamw_step_matches_a_bf16_reference() {
    let r = reference();
    let (w, b, x, c) = (
        floats(&r["w0"]),
        floats(&r["b0"]),
        floats(&r["x"]),
        floats(&r["c"]),
    );
    let q = |v: &[f32]| -> Vec<f64> { v.iter().map(|&v| bf16(f64::from(v))).collect() };
    let (wq, bq, xq, cq) = (q(&w), q(&b), q(&x), q(&c));
    let (n_s, n_i, n_o) = (6, 3, 4);
    // Forward, each value rounded to bf16 as the program stores it.
    let mut t = vec![0.0; n_s * n_o];
    let (mut loss, mut loss_scale) = (0.0, 0.0);
    for s in 0..n_s {
        for o in 0..n_o {
            let y = bf16((0..n_i).map(|i| xq[s * n_i + i] * wq[i * n_o + o]).sum());
            let z = bf16(y + bq[o]);
            t[s * n_o + o] = bf16(z.tanh());
            let term = bf16(t[s * n_o + o] * cq[s * n_o + o]);
            loss += term;
            loss_scale += term.abs();
        }
    }
    // Backward in f64 from the rounded forward values: dz = c (1 - t²).
    let dz: Vec<f64> = (0..n_s * n_o)
        .map(|k| cq[k] * (1.0 - t[k] * t[k]))
        .collect();
    let (mut grad, mut grad_scale) = (vec![0.0; 16], vec![0.0; 16]);
    for s in 0..n_s {
        for o in 0..n_o {
            let d = dz[s * n_o + o];
            for i in 0..n_i {
                grad[i * n_o + o] += xq[s * n_i + i] * d;
                grad_scale[i * n_o + o] += (xq[s * n_i + i] * d).abs();
            }
            grad[12 + o] += d;
            grad_scale[12 + o] += d.abs();
        }
    }

    let got = mixed_step(Precision::Mixed(MixedPrecision::BF16));
    // The loss sums 24 products: a rounding per partial sum and the
    // product's own, twice over (the reference rounds where XLA may not).
    check_bf16(
        "loss",
        &[got.loss],
        &[loss],
        &[loss_scale],
        2.0 * (24.0 + 1.0),
    );
    // A gradient sums 6 terms, each from 1 - t², its product with c, and
    // the product with x rounded in bf16.
    check_bf16("grad", &got.grad, &grad, &grad_scale, 2.0 * (6.0 + 3.0));

    // The update, from the step's own gradient, in f64: what f32 gives to
    // a few ulps. A bf16 update would be off by 2^-9 of |p| ~ 1e-3.
    let AdamW {
        lr,
        betas: (b1, b2),
        eps,
        weight_decay,
    } = MIXED_ADAMW;
    let (step, m0, v0) = mixed_state();
    let t = f64::from(step) + 1.0;
    let (bc1, bc2) = (1.0 - b1.powf(t), (1.0 - b2.powf(t)).sqrt());
    let p0: Vec<f64> = w.iter().chain(&b).map(|&v| f64::from(v)).collect();
    let g = &got.grad;
    let m: Vec<f64> = (0..16)
        .map(|k| b1 * f64::from(m0[k]) + (1.0 - b1) * g[k])
        .collect();
    let v: Vec<f64> = (0..16)
        .map(|k| b2 * f64::from(v0[k]) + (1.0 - b2) * g[k] * g[k])
        .collect();
    let p: Vec<f64> = (0..16)
        .map(|k| p0[k] * (1.0 - lr * weight_decay) - lr / bc1 * m[k] / (v[k].sqrt() / bc2 + eps))
        .collect();
    let tol = Tol {
        rel: 1e-6,
        abs: 1e-6,
    };
    compare(&got.m, &m, tol).unwrap_or_else(|e| panic!("m: {e}"));
    compare(&got.v, &v, tol).unwrap_or_else(|e| panic!("v: {e}"));
    compare(&got.params, &p, tol).unwrap_or_else(|e| panic!("params: {e}"));

    // The step ran in bf16: its gradient is not the f32 step's.
    let full = mixed_step(Precision::Full);
    let tol = Tol {
        rel: 1e-4,
        abs: 1e-6,
    };
    assert!(
        compare(&got.grad, &full.grad, tol).is_err(),
        "the mixed gradient equals the f32 one: {:?}",
        got.grad
    );
}

/// Static loss scaling by a power of two changes only exponents on the
/// way, so a step with it gives the gradient of the step without, bit for
/// bit; the loss comes back unscaled. The optimizer's update then computes
/// the same values from the same gradient, but the two programs differ
/// (one divides by the scale), so their canonical operand orders do, and
/// XLA may fuse a different product of `b1 * m + (1 - b1) * g` into a
/// multiply-add: the state may differ by the roundings of f32 that a sum
/// of two products makes (a few units in the last place of the result,
/// whose terms may be larger than it).
#[test]
fn loss_scaling_by_a_power_of_two_leaves_the_step_as_it_is() {
    let plain = mixed_step(Precision::Mixed(MixedPrecision::BF16));
    let f32_roundings = Tol {
        rel: 4.0 * f64::from(f32::EPSILON),
        abs: 0.0,
    };
    for k in [10, -4] {
        let scaled = mixed_step(Precision::Mixed(MixedPrecision {
            compute: DType::BF16,
            loss_scale_log2: Some(k),
        }));
        assert_eq!(scaled.loss, plain.loss, "scale 2^{k}");
        assert_eq!(scaled.grad, plain.grad, "scale 2^{k}");
        for (what, got, want) in [
            ("params", &scaled.params, &plain.params),
            ("m", &scaled.m, &plain.m),
            ("v", &scaled.v, &plain.v),
        ] {
            compare(got, want, f32_roundings)
                .unwrap_or_else(|e| panic!("scale 2^{k}, {what}: {e}"));
        }
    }
}
