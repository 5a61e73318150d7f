//! `radix::optim`: a training step (loss, `radix::grad`, update) compiled
//! as one executable whose parameters and optimizer state are donated and
//! updated in place, five steps of SGD with momentum and of AdamW equal to
//! PyTorch's (`tests/fixtures/optim/make.py`).

use radix::optim::{
    AdamW, AdamWState, AdamWStateWith, Sgd, SgdState, donate, zeros as zero_buffers,
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
