//! Derivatives of control flow: `if_` and `while_bounded` against f64
//! central differences (through the reference interpreter, and the same
//! gradient from the CPU plugin), `checkpoint` against a plain `call`, and
//! the memory `for_`'s gradient keeps: linear in the trip count, its
//! forward loop run once, and 1,000 iterations giving the gradient of the
//! unrolled loop. An optimization barrier passes values and their
//! cotangents through unchanged.

mod grad_common;

use grad_common::{check, gradients, loss, tagged};
use radix::testing::{Tol, compare, run_program, trace_fn};
use radix::{DType, Literal, Module, Program, Tensor};

/// A tagged f64 literal of the given values.
fn values(axis: &str, v: &[f64]) -> Literal {
    Literal::new(
        radix::Shape::tagged(DType::F64, &[(axis, v.len() as i64)]),
        v.to_vec(),
    )
}

/// The gradient program of `f` with respect to every input.
fn grad_program(inputs: &[Literal], f: impl Fn(&[Tensor]) -> Tensor) -> Program {
    trace_fn(inputs, |xs| {
        radix::grad(|p: &Vec<Tensor>, _: &()| f(p), &xs.to_vec(), &())
    })
    .unwrap()
}

/// The plugin computes the gradient program as the interpreter does.
fn check_on_plugin(inputs: &[Literal], f: impl Fn(&[Tensor]) -> Tensor) {
    let program = grad_program(inputs, f);
    let want = program.interpret(inputs);
    let got = run_program(program, inputs).unwrap();
    for (g, w) in got.iter().zip(&want) {
        // XLA's tanh and exp differ from libm's by a few units of f64
        // roundoff, compounded over the iterations.
        compare(g.data(), w.data(), Tol::ulps(DType::F64, 1024.0)).unwrap();
    }
}

fn zero() -> Tensor {
    Tensor::scalar(0.0, DType::F64)
}

#[test]
fn if_takes_the_derivative_of_the_branch_it_took() {
    // The branches capture different tensors (`w` only in one), and the
    // predicate depends on `x`: each input below takes another branch.
    let f = |v: &[Tensor]| {
        let (x, w) = (v[0], v[1]);
        let out = radix::if_(
            x.sum("d").gt(zero()),
            || vec![(x * w).tanh(), x.sum("d")],
            || vec![x.exp() * x, (x * x).sum("d")],
        );
        loss(out[0]) + out[1] * 0.7
    };
    let w = values("d", &[0.8, -1.1, 0.4]);
    let up = [values("d", &[0.3, 0.5, -0.1]), w.clone()];
    let down = [values("d", &[-0.3, -0.5, 0.1]), w];
    check(&up, f);
    check(&down, f);
    // `w` reaches the loss only through the branch `up` takes.
    assert!(gradients(&down, &f)[1].data().iter().all(|&g| g == 0.0));
    assert!(gradients(&up, &f)[1].data().iter().all(|&g| g != 0.0));
    check_on_plugin(&up, f);
    check_on_plugin(&down, f);
}

#[test]
fn an_if_inside_a_loop_saves_the_residuals_of_either_branch() {
    // Each iteration takes the branch its state picks, so both branches'
    // residuals are saved (zeros for the one not taken).
    let f = |v: &[Tensor]| {
        let w = v[1];
        let (state, outs) = radix::for_(5, "step", &[v[0]], |_, s| {
            let x = s[0];
            let next = radix::if_(
                x.sum("d").gt(zero()),
                || vec![(x * w).sin() - 0.3],
                || vec![x.tanh() + w * w],
            );
            (next.clone(), vec![(next[0] * x).sum("d")])
        });
        loss(state[0]) + loss(outs[0])
    };
    let inputs = [
        values("d", &[0.3, 0.2, -0.1]),
        values("d", &[0.9, -0.7, 0.5]),
    ];
    check(&inputs, f);
    check_on_plugin(&inputs, f);
}

/// Grows `x` by `w` until its squared norm reaches 4, at most `max_trips`
/// times; also counts the iterations (in the state, as a float).
fn grow(v: &[Tensor], max_trips: i64) -> (Tensor, Tensor) {
    let (x, w) = (v[0], v[1]);
    let out = radix::while_bounded(
        max_trips,
        &[x, zero()],
        |s| (s[0] * s[0]).sum("d").lt(Tensor::scalar(4.0, DType::F64)),
        |s| vec![s[0] * w + (s[0] * 0.1).tanh(), s[1] + 1.0],
    );
    (out[0], out[1])
}

#[test]
fn while_bounded_runs_its_iterations_backwards() {
    let inputs = [
        values("d", &[0.3, -0.4, 0.2]),
        values("d", &[1.3, 1.2, 1.25]),
    ];
    // Stopped by its condition after some iterations, and by the bound.
    for (max_trips, trips) in [(20, 5.0), (3, 3.0)] {
        let f = |v: &[Tensor]| {
            let (x, _) = grow(v, max_trips);
            loss(x) + (x * v[1]).sum("d")
        };
        let counted = trace_fn(&inputs, |v| grow(v, max_trips).1)
            .unwrap()
            .interpret(&inputs);
        assert_eq!(counted[0].data(), &[trips], "max_trips {max_trips}");
        check(&inputs, f);
        check_on_plugin(&inputs, f);
    }
}

#[derive(Module, Clone)]
struct Block {
    w: Tensor,
}

fn block(a: &(Block, Tensor)) -> Tensor {
    let h = a.1.dot(a.0.w, "i").rename("o", "i");
    h.tanh() + a.1 * 0.5
}

/// A stack of `n` blocks, each called through `call` or `checkpoint`.
fn stack(v: &[Tensor], n: usize, checkpointed: bool) -> Tensor {
    let mut h = v[n];
    for (k, &w) in v[..n].iter().enumerate() {
        let args = (Block { w }, h);
        h = if checkpointed {
            radix::checkpoint("block", block, &args)
        } else {
            radix::call("block", block, &args)
        };
        h = h * (1.0 + 0.01 * k as f64);
    }
    loss(h)
}

/// `n` weights (3 × 3) and an input of 2 rows.
fn stack_inputs(n: usize) -> Vec<Literal> {
    let mut inputs: Vec<Literal> = (0..n)
        .map(|k| {
            let l = tagged(&[("i", 3), ("o", 3)], 50 + k as u64);
            Literal::new(l.shape(), l.data().iter().map(|v| v * 0.8).collect())
        })
        .collect();
    inputs.push(tagged(&[("s", 2), ("i", 3)], 49));
    inputs
}

#[test]
fn checkpoint_runs_the_block_again_for_the_same_gradient() {
    let inputs = stack_inputs(3);
    check(&inputs, |v| stack(v, 3, true));
    // The derivative of a checkpointed block is one function that runs it
    // again; a plain block's is a forward function saving its residuals
    // and a backward function reading them.
    let text = |checkpointed| {
        grad_program(&inputs, |v| stack(v, 3, checkpointed))
            .optimize()
            .stablehlo()
    };
    let (remat, plain) = (text(true), text(false));
    assert_eq!(remat.matches("_vjp(").count(), 1, "{remat}");
    assert_eq!(remat.matches("_fwd(").count(), 0, "{remat}");
    assert_eq!(plain.matches("_vjp(").count(), 0, "{plain}");
    assert_eq!(plain.matches("_fwd(").count(), 1, "{plain}");

    // 30 blocks: the same gradient from the plugin, both ways.
    let inputs = stack_inputs(30);
    let run = |checkpointed| {
        run_program(
            grad_program(&inputs, |v| stack(v, 30, checkpointed)),
            &inputs,
        )
        .unwrap()
    };
    let (remat, plain) = (run(true), run(false));
    for (k, (r, p)) in remat.iter().zip(&plain).enumerate() {
        // The same ops in the same order, but XLA may fuse the two
        // programs differently: a few units of roundoff per block.
        if let Err(msg) = compare(r.data(), p.data(), Tol::ulps(DType::F64, 256.0)) {
            panic!("input {k}: {msg}");
        }
    }
}

/// `n` steps of a small recurrence with a per-step output, as `for_`.
fn recurrence(v: &[Tensor], n: i64) -> Tensor {
    let (w, table) = (v[1], v[2]);
    let (state, outs) = radix::for_(n, "step", &[v[0]], |i, s| {
        let row = step_row(table, i, s[0]);
        let next = (s[0] * w + row).tanh();
        (vec![next], vec![(next * s[0]).sum("d")])
    });
    loss(state[0]) + outs[0].sum("step") * 0.01
}

/// Row `i mod 4` of `table`, shaped as `like`.
fn step_row(table: Tensor, i: Tensor, like: Tensor) -> Tensor {
    let four = Tensor::scalar(4.0, DType::I32);
    let r = i.rem(four);
    table
        .dynamic_slice(&[r, Tensor::scalar(0.0, DType::I32)], &[1, 8])
        .reshape_to(like.shape())
}

/// The same recurrence unrolled in Rust.
fn unrolled(v: &[Tensor], n: i64) -> Tensor {
    let (w, table) = (v[1], v[2]);
    let mut s = v[0];
    let mut outs = zero();
    for i in 0..n {
        let row = step_row(table, Tensor::scalar(i as f64, DType::I32), s);
        let next = (s * w + row).tanh();
        outs = outs + (next * s).sum("d");
        s = next;
    }
    loss(s) + outs * 0.01
}

fn recurrence_inputs() -> Vec<Literal> {
    vec![
        tagged(&[("d", 8)], 60),
        tagged(&[("d", 8)], 61),
        tagged(&[("t", 4), ("d", 8)], 62),
    ]
}

#[test]
fn for_gradients_keep_memory_linear_in_the_trip_count() {
    let inputs = recurrence_inputs();
    let bytes: Vec<usize> = [16, 32, 64]
        .iter()
        .map(|&n| {
            let program = grad_program(&inputs, |v| recurrence(v, n)).optimize();
            let text = program.stablehlo();
            // One forward loop (saving) and one backward loop: the
            // forward pass runs once.
            assert_eq!(text.matches("\"stablehlo.while\"").count(), 2, "{text}");
            let b = program.loop_state_bytes();
            println!("for_ of {n} iterations: its gradient's loops carry {b} bytes");
            b
        })
        .collect();
    // Each doubling of the trip count adds the same rows again: the bytes
    // are affine in the trip count (a whole state saved per iteration,
    // stacked outputs included, would grow with its square).
    assert_eq!(bytes[2] - bytes[1], 2 * (bytes[1] - bytes[0]), "{bytes:?}");
    // The rows kept per iteration: the state the body's derivative reads
    // (8 f64), its tanh (8 f64), the counter and the row index (i32), and
    // the stacked output and its cotangent (f64), not the captured table
    // (32 f64).
    let per_trip = (bytes[1] - bytes[0]) / 16;
    assert_eq!(per_trip, 2 * 8 * 8 + 2 * 4 + 2 * 8, "bytes per iteration");
}

#[test]
fn a_thousand_iterations_give_the_unrolled_gradient() {
    let inputs = recurrence_inputs();
    let got = run_program(grad_program(&inputs, |v| recurrence(v, 1000)), &inputs).unwrap();
    let want = gradients(&inputs, &|v| unrolled(v, 1000));
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        // Sums over 1,000 iterations of terms of order 1, through XLA's
        // tanh against libm's.
        let tol = Tol::sum(DType::F64, 1000, 1.0).plus(Tol::ulps(DType::F64, 1024.0));
        if let Err(msg) = compare(g.data(), w.data(), tol) {
            panic!("input {k}: {msg}");
        }
    }
}

#[test]
fn an_optimization_barrier_passes_values_and_cotangents() {
    // The barrier ties `w` to `x`'s tanh, as a derivative rule ties a
    // weight to the cotangent that needs it: the same function, and so
    // the same gradient, as without it.
    let f = |v: &[Tensor]| {
        let (x, w) = (v[0], v[1]);
        let tied = radix::optimization_barrier(&[w, x.tanh()]);
        loss(tied[1] * tied[0] + x * w)
    };
    let inputs = [
        values("d", &[0.3, -0.5, 0.9]),
        values("d", &[0.8, -1.1, 0.4]),
    ];
    check(&inputs, f);
    check_on_plugin(&inputs, f);
    let plain = |v: &[Tensor]| loss(v[0].tanh() * v[1] + v[0] * v[1]);
    assert_eq!(gradients(&inputs, &f), gradients(&inputs, &plain));
    let text = grad_program(&inputs, f).stablehlo_without_locations();
    assert!(text.contains("stablehlo.optimization_barrier"), "{text}");
}
