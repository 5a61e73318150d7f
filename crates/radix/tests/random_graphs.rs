//! Property tests: random well-typed graphs compiled through the CPU plugin
//! give what the reference interpreter gives, and their gradients
//! (`radix::grad`) match central finite differences in f64; every graph and
//! its gradient's verify (`Program::verify`) as traced and after the passes.

mod kernels;

use proptest::prelude::*;
use radix::testing::{Tol, compare, run_program, trace_fn};
use radix::{DType, Literal, Shape, Tensor, Unary};

/// One step of a random graph: builds a `{a=2, b=3}` f32 value from earlier ones
/// (operands are indices modulo the number of values so far).
#[derive(Debug, Clone)]
enum Step {
    Unary(Unary, usize),
    Add(usize, usize),
    Sub(usize, usize),
    MulTanh(usize, usize),
    Max(usize, usize),
    Min(usize, usize),
    Scale(usize, f32),
    Reverse(usize, bool),
    SumBack(usize, bool),
    Softmax(usize, bool),
    Dot(usize, usize, usize),
    Select(usize, usize, usize),
    ConcatSlices(usize, usize),
    Gather(usize),
    Transpose2(usize),
    Bf16RoundTrip(usize),
    /// A custom call (a Rust kernel) among the ops.
    Softsign(usize),
}

const SAFE_UNARY: [Unary; 6] = [
    Unary::Neg,
    Unary::Abs,
    Unary::Tanh,
    Unary::Sin,
    Unary::Cos,
    Unary::Logistic,
];

fn step() -> impl Strategy<Value = Step> {
    let i = || 0usize..16;
    prop_oneof![
        (0..SAFE_UNARY.len(), i()).prop_map(|(u, a)| Step::Unary(SAFE_UNARY[u], a)),
        (i(), i()).prop_map(|(a, b)| Step::Add(a, b)),
        (i(), i()).prop_map(|(a, b)| Step::Sub(a, b)),
        (i(), i()).prop_map(|(a, b)| Step::MulTanh(a, b)),
        (i(), i()).prop_map(|(a, b)| Step::Max(a, b)),
        (i(), i()).prop_map(|(a, b)| Step::Min(a, b)),
        (i(), -2.0f32..2.0).prop_map(|(a, c)| Step::Scale(a, c)),
        (i(), any::<bool>()).prop_map(|(a, b)| Step::Reverse(a, b)),
        (i(), any::<bool>()).prop_map(|(a, b)| Step::SumBack(a, b)),
        (i(), any::<bool>()).prop_map(|(a, b)| Step::Softmax(a, b)),
        (i(), i(), i()).prop_map(|(a, b, c)| Step::Dot(a, b, c)),
        (i(), i(), i()).prop_map(|(a, b, c)| Step::Select(a, b, c)),
        (i(), i()).prop_map(|(a, b)| Step::ConcatSlices(a, b)),
        i().prop_map(Step::Gather),
        i().prop_map(Step::Transpose2),
        i().prop_map(Step::Bf16RoundTrip),
        i().prop_map(Step::Softsign),
    ]
}

fn axis(first: bool) -> &'static str {
    if first { "a" } else { "b" }
}

fn apply(step: &Step, v: &[Tensor]) -> Tensor {
    let at = |i: usize| v[i % v.len()];
    match *step {
        Step::Unary(u, a) => match u {
            Unary::Neg => -at(a),
            Unary::Abs => at(a).abs(),
            Unary::Tanh => at(a).tanh(),
            Unary::Sin => at(a).sin(),
            Unary::Cos => at(a).cos(),
            _ => at(a).logistic(),
        },
        Step::Add(a, b) => at(a) + at(b),
        Step::Sub(a, b) => at(a) - at(b),
        Step::MulTanh(a, b) => (at(a) * at(b)).tanh(),
        Step::Max(a, b) => at(a).maximum(at(b)),
        Step::Min(a, b) => at(a).minimum(at(b)),
        Step::Scale(a, c) => at(a) * c as f64,
        Step::Reverse(a, first) => at(a).reverse(axis(first)),
        Step::SumBack(a, first) => {
            let x = at(a);
            x.sum(axis(first)).broadcast(x.shape()) * 0.5
        }
        Step::Softmax(a, first) => at(a).softmax(axis(first)),
        Step::Dot(a, b, c) => {
            let scores = at(a).dot(at(b).rename("a", "k"), "b");
            (scores.dot(at(c).rename("a", "k"), "k") * 0.25).tanh()
        }
        Step::Select(a, b, c) => at(a).gt(at(b)).select(at(b), at(c)),
        Step::ConcatSlices(a, b) => {
            Tensor::concatenate(&[at(a).slice("b", 0..1), at(b).slice("b", 1..3)], "b")
        }
        Step::Gather(a) => {
            let ids = Tensor::from_slice(&[1i32, 0], &[2]).with_tags(&["a"]);
            at(a).gather("a", ids)
        }
        Step::Transpose2(a) => at(a).transpose(["b", "a"]).transpose(["a", "b"]),
        Step::Bf16RoundTrip(a) => at(a).convert(DType::BF16).convert(DType::F32),
        Step::Softsign(a) => kernels::softsign(at(a)),
    }
}

/// The steps with a derivative everywhere the graphs reach (the custom
/// call declares none; a bf16 round trip is a step function).
fn differentiable_step() -> impl Strategy<Value = Step> {
    step().prop_filter("differentiable", |s| {
        !matches!(s, Step::Softsign(_) | Step::Bf16RoundTrip(_))
    })
}

/// A scalar of the graph's values: each element weighted differently.
fn weighted_sum(values: &[Tensor]) -> Tensor {
    let shape = values[0].shape();
    let w = Tensor::iota(shape, "b") * 0.3 + Tensor::iota(shape, "a") * 0.7 - 0.4;
    let last = values[values.len() - 1];
    let mid = values[values.len() / 2];
    (last * w).sum(["a", "b"]) + (mid * mid).sum(["a", "b"]) * 0.5
}

fn f64_input() -> impl Strategy<Value = Literal> {
    prop::collection::vec(-2.0f64..2.0, 6)
        .prop_map(|v| Literal::new(Shape::tagged(DType::F64, &[("a", 2), ("b", 3)]), v))
}

fn input() -> impl Strategy<Value = Literal> {
    prop::collection::vec(-2.0f64..2.0, 6)
        .prop_map(|v| Literal::new(Shape::tagged(DType::F32, &[("a", 2), ("b", 3)]), v))
}

/// That `program` verifies as traced and after the passes (which check
/// themselves after each pass in debug builds, as differentiation does).
fn verifies(program: &radix::Program) -> Result<(), TestCaseError> {
    for p in [program.clone(), program.clone().optimize()] {
        p.verify()
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", p.stablehlo())))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn plugin_matches_interpreter(inputs in prop::collection::vec(input(), 2), steps in prop::collection::vec(step(), 1..10)) {
        let program = trace_fn(&inputs, |xs| {
            let mut values = xs.to_vec();
            for s in &steps {
                let next = apply(s, &values);
                values.push(next);
            }
            (values[values.len() - 1], values[values.len() / 2])
        }).unwrap();
        verifies(&program)?;
        let want = program.interpret(&inputs);
        let text = program.stablehlo();
        let got = run_program(program, &inputs).unwrap();
        // Up to 10 steps on values of order 1, each with sums of at most 3
        // terms: the plugin rounds to f32 at every step, the interpreter
        // works in f64, and tanh, sin, cos, exp are XLA's approximations;
        // 1e-4 relative is ~840 units of f32 roundoff (about 16 per step,
        // with room for the error growth through the chain).
        let tol = Tol { rel: 1e-4, abs: 1e-5 };
        for (g, w) in got.iter().zip(&want) {
            prop_assert_eq!(g.shape(), w.shape());
            if let Err(msg) = compare(g.data(), w.data(), tol) {
                return Err(TestCaseError::fail(format!("{msg}\n{steps:?}\n{text}")));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gradients_match_finite_differences(inputs in prop::collection::vec(f64_input(), 2), steps in prop::collection::vec(differentiable_step(), 1..10)) {
        let graph = |xs: &[Tensor]| {
            let mut values = xs.to_vec();
            for s in &steps {
                let next = apply(s, &values);
                values.push(next);
            }
            weighted_sum(&values)
        };
        let grads = trace_fn(&inputs, |xs| {
            radix::grad(|p: &Vec<Tensor>, _: &()| graph(p), &xs.to_vec(), &())
        })
        .unwrap();
        verifies(&grads)?;
        let grads = grads.interpret(&inputs);
        let value = trace_fn(&inputs, graph).unwrap();
        let h = 1e-6;
        for i in 0..inputs.len() {
            let want: Vec<f64> = (0..6)
                .map(|j| {
                    let at = |d: f64| {
                        let mut xs = inputs.clone();
                        let mut v = xs[i].data().to_vec();
                        v[j] += d;
                        xs[i] = Literal::new(xs[i].shape(), v);
                        value.interpret(&xs)[0].data()[0]
                    };
                    (at(h) - at(-h)) / (2.0 * h)
                })
                .collect();
            // Central differences in f64 with h = 1e-6: truncation ~1e-12
            // times the third derivative, cancellation ~1e-10 of the value.
            let tol = Tol { rel: 1e-5, abs: 1e-6 };
            if let Err(msg) = compare(grads[i].data(), &want, tol) {
                return Err(TestCaseError::fail(format!("input {i}: {msg}\n{steps:?}")));
            }
        }
    }
}
