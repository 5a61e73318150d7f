//! `radix::value_and_grad` against `jax.value_and_grad` of the same
//! functions (written in both; JAX's side and its recorded values are
//! `tests/fixtures/grad/make.py` and `reference.json`), in f64, compiled
//! by the CPU plugin and through the reference interpreter.

use std::collections::BTreeMap;

use radix::testing::{Tol, compare, run_program, trace_fn};
use radix::{DType, Literal, PadSpec, Shape, Tensor};

/// One function's recorded case: its inputs by name, its value, its
/// gradients by parameter name.
struct Case {
    params: Vec<(String, Literal)>,
    args: Vec<(String, Literal)>,
    value: f64,
    grads: BTreeMap<String, Vec<f64>>,
}

fn case(name: &str) -> Case {
    let text = include_str!("fixtures/grad/reference.json");
    let all: serde_json::Value = serde_json::from_str(text).unwrap();
    let c = &all[name];
    let tensors = |v: &serde_json::Value| -> Vec<(String, Literal, Vec<f64>)> {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, t)| {
                let dims: Vec<i64> = t["dims"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_i64().unwrap())
                    .collect();
                let data: Vec<f64> = t["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_f64().unwrap())
                    .collect();
                let is_int = t["data"].as_array().unwrap().iter().all(|d| d.is_i64());
                let dtype = if is_int { DType::I32 } else { DType::F64 };
                (
                    k.clone(),
                    Literal::new(Shape::new(dtype, &dims), data.clone()),
                    data,
                )
            })
            .collect()
    };
    Case {
        params: tensors(&c["params"])
            .into_iter()
            .map(|t| (t.0, t.1))
            .collect(),
        args: tensors(&c["args"])
            .into_iter()
            .map(|t| (t.0, t.1))
            .collect(),
        value: c["value"].as_f64().unwrap(),
        grads: tensors(&c["grads"])
            .into_iter()
            .map(|t| (t.0, t.2))
            .collect(),
    }
}

/// The tensors of one call, by name: the parameters (differentiated) and
/// the other arguments.
type Named = BTreeMap<String, Tensor>;

/// Checks `f`'s value and gradients against JAX's for case `name`; `tags`
/// names each input's axes.
fn check(name: &str, tags: &[(&str, &[&str])], f: fn(&Named, &Named) -> Tensor) {
    let c = case(name);
    let tag = |n: &str, l: &Literal| {
        let t = tags.iter().find(|t| t.0 == n).map_or(&[][..], |t| t.1);
        Literal::new(l.shape().with_tags(t), l.data().to_vec())
    };
    let inputs: Vec<Literal> = c
        .params
        .iter()
        .chain(&c.args)
        .map(|(n, l)| tag(n, l))
        .collect();
    let n_params = c.params.len();
    let names: Vec<String> = c
        .params
        .iter()
        .chain(&c.args)
        .map(|p| p.0.clone())
        .collect();
    let program = trace_fn(&inputs, |xs| {
        let named =
            |r: std::ops::Range<usize>| -> Named { r.map(|i| (names[i].clone(), xs[i])).collect() };
        let p: Named = named(0..n_params);
        let a: Named = named(n_params..xs.len());
        let params: Vec<Tensor> = p.values().copied().collect();
        let keys: Vec<String> = p.keys().cloned().collect();
        let a_keys: Vec<String> = a.keys().cloned().collect();
        let (value, grads) = radix::value_and_grad(
            |ps: &Vec<Tensor>, a: &Vec<Tensor>| {
                let p: Named = keys.iter().cloned().zip(ps.iter().copied()).collect();
                let a: Named = a_keys.iter().cloned().zip(a.iter().copied()).collect();
                f(&p, &a)
            },
            &params,
            &a.values().copied().collect::<Vec<_>>(),
        );
        let mut out = vec![value];
        out.extend(grads);
        out
    })
    .unwrap();
    let interpreted = program.interpret(&inputs);
    let compiled = run_program(program, &inputs).unwrap();
    // f64 throughout: JAX and radix order sums differently, and XLA's
    // transcendental approximations differ from the interpreter's libm.
    let tol = Tol {
        rel: 1e-9,
        abs: 1e-11,
    };
    let mut keys: Vec<&String> = c.params.iter().map(|p| &p.0).collect();
    keys.sort();
    for got in [&interpreted, &compiled] {
        compare(got[0].data(), &[c.value], tol).unwrap_or_else(|m| panic!("{name} value: {m}"));
        for (k, g) in keys.iter().zip(&got[1..]) {
            compare(g.data(), &c.grads[*k], tol)
                .unwrap_or_else(|m| panic!("{name} gradient of {k}: {m}"));
        }
    }
}

#[test]
fn mlp_cross_entropy() {
    check(
        "mlp_xent",
        &[
            ("w1", &["i", "h"]),
            ("b1", &["h"]),
            ("w2", &["h", "o"]),
            ("x", &["s", "i"]),
            ("labels", &["s"]),
        ],
        |p, a| {
            let x = a["x"];
            let pre = x.dot(p["w1"], "i");
            let h = (pre + p["b1"].broadcast(pre.shape())).tanh();
            let logits = h.dot(p["w2"], "h");
            let s = logits.shape();
            let logp = logits - logits.log_sum_exp("o").broadcast(s);
            let classes = Tensor::iota(s.with_dtype(DType::I32), "o");
            let hit = classes.eq(a["labels"].broadcast(s.with_dtype(DType::I32)));
            -hit.select(logp, Tensor::zeros(s)).sum(["s", "o"]) / s.dim("s").unwrap() as f64
        },
    );
}

#[test]
fn rmsnorm_attention() {
    check(
        "rmsnorm_attention",
        &[("x", &["s", "d"]), ("g", &["d"]), ("w", &["s", "d"])],
        |p, a| {
            let x = p["x"];
            let s = x.shape();
            let ms = (x * x).mean("d") + 1e-5;
            let rms = x * ms.rsqrt().broadcast(s) * p["g"].broadcast(s);
            let scores = (rms.dot(rms.rename("s", "t"), "d") * 0.5).softmax("t");
            let mixed = scores.dot(x.rename("s", "t"), "t");
            (mixed * a["w"]).sum(["s", "d"])
        },
    );
}

#[test]
fn elementwise() {
    check(
        "elementwise",
        &[("x", &["a", "b"]), ("y", &["a", "b"])],
        |p, _| {
            let (x, y) = (p["x"], p["y"]);
            let terms = x.exp() * y.sin()
                + (x * x).log1p()
                + x.maximum(y) * x.minimum(y)
                + (y.abs() + 1.0).sqrt()
                + x.pow(Tensor::full(x.shape(), 2.0)) / (y * y + 1.0)
                + x.logistic() * y.tanh()
                + x.gt(y).select(x.cos(), x * y);
            terms.sum(["a", "b"])
        },
    );
}

#[test]
fn embedding() {
    check(
        "embedding",
        &[
            ("table", &["v", "d"]),
            ("u", &["k", "d"]),
            ("ids", &["s"]),
            ("at", &["k"]),
            ("w", &["s", "d"]),
        ],
        |p, a| {
            let rows = p["table"].gather("v", a["ids"]);
            let scattered = p["table"].scatter_add("v", a["at"], p["u"]);
            (rows.tanh() * a["w"]).sum(["s", "d"]) + (scattered * scattered).sum(["v", "d"]) * 0.1
        },
    );
}

#[test]
fn shapes() {
    check(
        "shapes",
        &[("x", &["a", "b"]), ("w", &["a", "b"]), ("v", &["a", "b"])],
        |p, a| {
            let x = p["x"];
            let strided = x.slice_step("b", 0..4, 2);
            let joined = Tensor::concatenate(&[strided, x.slice("b", 1..3)], "b");
            let t = joined.transpose(["b", "a"]).sum(["a", "b"]);
            let padded = x.pad(
                0.0,
                PadSpec {
                    low: vec![1, 0],
                    high: vec![0, 2],
                    interior: vec![0, 0],
                },
            );
            (joined * t.broadcast(joined.shape())).sum(["a", "b"])
                + (padded * a["w"]).sum(["a", "b"])
                + (x.reverse("b") * a["v"]).sum(["a", "b"])
        },
    );
}

#[test]
fn reductions() {
    check(
        "reductions",
        &[("x", &["a", "b"]), ("w", &["a", "b"])],
        |p, a| {
            let x = p["x"];
            let m = x.max("b");
            let top = x.top_k("b", 3).0;
            (m * m).sum("a") + x.log_sum_exp("a").sum("b") + (top * a["w"]).sum(["a", "b"])
        },
    );
}
