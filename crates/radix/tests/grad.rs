//! `radix::grad`: each op's derivative rule against central finite
//! differences in f64 (both through the reference interpreter), gradients
//! of model trees, zero gradients through integers, the derivative of a
//! `call` (control flow's other rules: `grad_control.rs`), errors for ops
//! without a rule, and a gradient compiled by the
//! CPU plugin equal to the interpreter's.

mod grad_common;
mod kernels;

use std::sync::LazyLock;

use grad_common::{check, finite_differences, gradients, lit, loss, positive, tagged};
use radix::testing::{Tol, compare, run_program, trace_fn};
use radix::{Attrs, CustomCall, DType, Literal, Module, Order, PadSpec, Shape, SliceSpec, Tensor};

/// `x / (1 + |x|)` of an f64 input, elementwise: the kernel of both
/// softsign calls.
fn softsign_kernel(k: &radix::custom_call::Kernel<'_>) -> Result<(), String> {
    let (x, y) = (k.input::<f64>(0)?, k.output::<f64>(0)?);
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x / (1.0 + x.abs());
    }
    Ok(())
}

/// A softsign call named `name`: the kernel, and the formula in ops as its
/// fallback.
fn softsign_builder(name: &str) -> radix::custom_call::CustomCallBuilder {
    CustomCall::builder(name, 1, |s, _| Ok(vec![s[0]]), softsign_kernel)
        .fallback(|x, _| vec![x[0] / (x[0].abs() + 1.0)])
}

/// `x / (1 + |x|)` in f64 as a Rust kernel that declares its derivative.
static SOFTSIGN_F64: LazyLock<CustomCall> = LazyLock::new(|| {
    softsign_builder("radix_test.softsign_f64")
        .derivative(|x, _, g, _| {
            let d = x[0].abs() + 1.0;
            vec![g[0] / (d * d)]
        })
        .register()
        .expect("declared")
});

/// The same function, differentiated through its fallback.
static SOFTSIGN_VIA_FALLBACK: LazyLock<CustomCall> = LazyLock::new(|| {
    softsign_builder("radix_test.softsign_via_fallback")
        .differentiate_fallback()
        .register()
        .expect("declared")
});

#[test]
fn unary_rules() {
    let x = [lit(&[2, 3], 1)];
    let p = [positive(&[2, 3], 2)];
    check(&x, |v| loss(-v[0]));
    check(&x, |v| loss(v[0].abs()));
    check(&x, |v| loss(v[0].exp()));
    check(&p, |v| loss(v[0].log()));
    check(&p, |v| loss(v[0].log1p()));
    check(&x, |v| loss(v[0].expm1()));
    check(&p, |v| loss(v[0].sqrt()));
    check(&p, |v| loss(v[0].rsqrt()));
    check(&x, |v| loss(v[0].tanh()));
    check(&x, |v| loss(v[0].sin()));
    check(&x, |v| loss(v[0].cos()));
    check(&x, |v| loss(v[0].logistic()));
    check(&x, |v| loss(v[0].floor() + v[0]));
    check(&x, |v| loss(v[0].sign() * v[0]));
    check(&x, |v| loss(v[0].silu()));
    check(&x, |v| loss(v[0].gelu_tanh()));
}

#[test]
fn binary_rules() {
    let xy = [lit(&[4], 3), lit(&[4], 4)];
    let pq = [positive(&[4], 5), positive(&[4], 6)];
    check(&xy, |v| loss(v[0] + v[1]));
    check(&xy, |v| loss(v[0] - v[1]));
    check(&xy, |v| loss(v[0] * v[1]));
    check(&pq, |v| loss(v[0] / v[1]));
    check(&pq, |v| loss(v[0].pow(v[1])));
    check(&xy, |v| loss(v[0].maximum(v[1])));
    check(&xy, |v| loss(v[0].minimum(v[1])));
    check(&pq, |v| loss(v[0].rem(v[1] * 0.3)));
    check(&xy, |v| loss(v[0].gt(v[1]).select(v[0] * 2.0, v[1].exp())));
    check(&xy, |v| loss(v[0].clamp(-0.3, 0.4) * v[1]));
    // A scalar operand, broadcast implicitly.
    check(&[lit(&[], 7), lit(&[3], 8)], |v| loss(v[1] * v[0] + v[0]));
}

#[test]
fn shape_rules() {
    let x = [tagged(&[("a", 2), ("b", 3)], 9)];
    check(&x, |v| loss(v[0].reshape(&[3, 2])));
    check(&x, |v| loss(v[0].transpose(["b", "a"])));
    check(&[tagged(&[("b", 3)], 10)], |v| {
        loss(v[0].broadcast(Shape::tagged(DType::F64, &[("a", 2), ("b", 3)])))
    });
    check(&[lit(&[1, 3], 11)], |v| {
        loss(v[0].broadcast_in_dim(Shape::new(DType::F64, &[4, 3]), &[0, 1]))
    });
    check(&x, |v| loss(v[0].slice_step("b", 0..3, 2)));
    check(&x, |v| {
        loss(v[0].slice_all(SliceSpec {
            start: vec![1, 1],
            limit: vec![2, 3],
            strides: vec![1, 1],
        }))
    });
    check(&[x[0].clone(), tagged(&[("a", 2), ("b", 2)], 12)], |v| {
        loss(Tensor::concatenate(&[v[0], v[1], v[0]], "b"))
    });
    check(&x, |v| {
        loss(v[0].pad(
            0.0,
            PadSpec {
                low: vec![1, 0],
                high: vec![0, 2],
                interior: vec![1, 1],
            },
        ))
    });
    check(&x, |v| loss(v[0].reverse("b")));
    // Through f32 the differences are f32's rounding: compare the rule with
    // the identity's instead.
    let through = gradients(&x, &|v: &[Tensor]| {
        loss(v[0].convert(DType::F32).convert(DType::F64))
    });
    let direct = gradients(&x, &|v: &[Tensor]| loss(v[0]));
    compare(
        through[0].data(),
        direct[0].data(),
        Tol::ulps(DType::F32, 1.0),
    )
    .unwrap();
}

#[test]
fn dot_rules() {
    let l = tagged(&[("b", 2), ("m", 3), ("k", 4)], 13);
    let r = tagged(&[("k", 4), ("b", 2), ("n", 5)], 14);
    check(&[l.clone(), r], |v| loss(v[0].dot(v[1], "k")));
    let w = tagged(&[("n", 3), ("m", 4)], 15);
    let x = tagged(&[("s", 2), ("m", 4)], 16);
    check(&[w, x], |v| loss(v[1].dot(v[0], "m")));
    check(&[lit(&[3, 4], 17), lit(&[4, 2], 18)], |v| {
        loss(v[0].matmul(v[1]))
    });
    // A weight's cotangent over tokens `(b, s)` contracts both axes, merged
    // into one.
    let w = tagged(&[("n", 3), ("m", 4)], 41);
    let x = tagged(&[("b", 2), ("s", 3), ("m", 4)], 42);
    let inputs = [w, x];
    check(&inputs, |v| loss(v[1].dot(v[0], "m")));
    let program = trace_fn(&inputs, |v| {
        radix::grad(|w: &Tensor, x: &Tensor| loss(x.dot(*w, "m")), &v[0], &v[1])
    })
    .unwrap();
    let text = program.stablehlo_without_locations();
    assert!(text.contains("lhs_contracting_dimensions = [0]"), "{text}");
    assert!(!text.contains("contracting_dimensions = [0, 1]"), "{text}");
}

#[test]
fn reduce_and_indexing_rules() {
    let x = [tagged(&[("a", 3), ("b", 4)], 19)];
    check(&x, |v| loss(v[0].sum("b")));
    check(&x, |v| loss(v[0].max("a")));
    check(&x, |v| loss(v[0].min("b")));
    check(&x, |v| loss(v[0].softmax("b")));
    check(&x, |v| v[0].log_sum_exp("b").sum("a"));
    check(&x, |v| loss(v[0].mean("b")));
    // A maximum reached twice shares its cotangent.
    let ties = Literal::new(Shape::tagged(DType::F64, &[("a", 3)]), vec![0.5, 0.5, 0.1]);
    let got = gradients(&[ties], &|v: &[Tensor]| v[0].max("a"));
    assert_eq!(got[0].data(), [0.5, 0.5, 0.0]);
    // Embedding rows, with a repeated id.
    check(&x, |v| {
        let ids = Tensor::from_slice(&[2i32, 0, 2], &[3]).with_tags(&["s"]);
        loss(v[0].gather("a", ids))
    });
    check(&[x[0].clone(), tagged(&[("s", 2), ("b", 4)], 20)], |v| {
        let ids = Tensor::from_slice(&[2i32, 0], &[2]).with_tags(&["s"]);
        loss(v[0].scatter_add("a", ids, v[1]) * v[0])
    });
    check(&[x[0].clone(), tagged(&[("s", 2), ("b", 4)], 21)], |v| {
        let ids = Tensor::from_slice(&[2i32, 0], &[2]).with_tags(&["s"]);
        loss(v[0].scatter("a", ids, v[1]).tanh())
    });
    check(&x, |v| {
        let one = Tensor::scalar(1.0, DType::I32);
        loss(v[0].dynamic_slice(&[one, one], &[2, 2]))
    });
    check(&[x[0].clone(), lit(&[2, 2], 22)], |v| {
        let one = Tensor::scalar(1.0, DType::I32);
        loss(v[0].dynamic_update_slice(v[1], &[one, one]) * v[0])
    });
    check(&x, |v| loss(v[0].sort("b", Order::Descending)));
    check(&x, |v| loss(v[0].top_k("b", 2).0));
}

#[test]
fn integer_values_have_zero_gradients() {
    let x = [lit(&[4], 23)];
    let got = gradients(&x, &|v: &[Tensor]| {
        let i = (v[0] * 10.0).convert(DType::I32);
        loss(i.convert(DType::F64)) + v[0].argmax(0).convert(DType::F64)
    });
    assert_eq!(got[0].data(), [0.0; 4]);
}

/// A two-layer model whose gradient comes back as the same struct.
#[derive(Module, Clone)]
struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
}

fn mlp_loss(m: &Mlp, x: Tensor) -> Tensor {
    let h = (x.dot(m.w1, "i")
        + m.b1
            .broadcast(Shape::tagged(DType::F64, &[("s", 2), ("h", 3)])))
    .tanh();
    h.dot(m.w2, "h").sum(["s", "o"])
}

#[test]
fn gradients_of_a_model_tree() {
    let inputs = [
        tagged(&[("i", 4), ("h", 3)], 24),
        tagged(&[("h", 3)], 25),
        tagged(&[("h", 3), ("o", 2)], 26),
        tagged(&[("s", 2), ("i", 4)], 27),
    ];
    let f = |v: &[Tensor]| {
        let m = Mlp {
            w1: v[0],
            b1: v[1],
            w2: v[2],
        };
        mlp_loss(&m, v[3])
    };
    let program = trace_fn(&inputs, |v| {
        let m = Mlp {
            w1: v[0],
            b1: v[1],
            w2: v[2],
        };
        let (value, g) = radix::value_and_grad(|m: &Mlp, x: &Tensor| mlp_loss(m, *x), &m, &v[3]);
        (value, g.w1, g.b1, g.w2)
    })
    .unwrap();
    let got = program.interpret(&inputs);
    let want = finite_differences(&inputs, &f);
    let tol = Tol {
        rel: 1e-6,
        abs: 1e-7,
    };
    assert_eq!(
        got[0].data()[0],
        trace_fn(&inputs, f).unwrap().interpret(&inputs)[0].data()[0]
    );
    for k in 0..3 {
        compare(got[k + 1].data(), &want[k], tol).unwrap();
        assert_eq!(got[k + 1].shape(), inputs[k].shape());
    }
}

#[derive(Module, Clone)]
struct Layer {
    w: Tensor,
}

fn layer(a: &(Layer, Tensor)) -> Tensor {
    a.1.dot(a.0.w, "i").rename("o", "i").tanh()
}

#[test]
fn the_derivative_of_a_call_is_a_call() {
    let inputs = [
        tagged(&[("i", 3), ("o", 3)], 28),
        tagged(&[("i", 3), ("o", 3)], 29),
        tagged(&[("s", 2), ("i", 3)], 30),
    ];
    let f = |v: &[Tensor]| {
        let h = radix::call("layer", layer, &(Layer { w: v[0] }, v[2]));
        let h = radix::call("layer", layer, &(Layer { w: v[1] }, h));
        loss(h)
    };
    check(&inputs, f);
    let program = trace_fn(&inputs, |xs| {
        radix::grad(|p: &Vec<Tensor>, _: &()| f(p), &xs.to_vec(), &())
    })
    .unwrap();
    // One forward function giving the block's residuals and one backward
    // function reading them, each called once per block.
    let text = program.optimize().stablehlo();
    assert_eq!(text.matches("func.func private @vjp_").count(), 1, "{text}");
    assert_eq!(text.matches("_fwd(").count(), 1, "{text}");
    assert_eq!(text.matches("_bwd(").count(), 1, "{text}");
    assert_eq!(text.matches("_fwd}").count(), 2, "{text}");
    assert_eq!(text.matches("_bwd}").count(), 2, "{text}");
    assert_eq!(text.matches("_vjp(").count(), 0, "{text}");
}

#[test]
fn for_loops_run_backwards() {
    // The state, a captured weight, the counter picking a row of a captured
    // table, and per-step outputs stacked.
    let inputs = [
        tagged(&[("d", 3)], 36),
        tagged(&[("d", 3)], 37),
        tagged(&[("t", 4), ("d", 3)], 38),
    ];
    let f = |v: &[Tensor]| {
        let (w, table) = (v[1], v[2]);
        let (state, outs) = radix::for_(4, "step", &[v[0]], |i, s| {
            let zero = Tensor::scalar(0.0, DType::I32);
            let row = table
                .dynamic_slice(&[i, zero], &[1, 3])
                .reshape_to(s[0].shape());
            let next = (s[0] * w + row).tanh();
            (vec![next], vec![(next * s[0]).sum("d")])
        });
        loss(state[0]) + loss(outs[0])
    };
    check(&inputs, f);
    // The plugin runs the two loops as the interpreter does.
    let program = trace_fn(&inputs, |xs| {
        radix::grad(|p: &Vec<Tensor>, _: &()| f(p), &xs.to_vec(), &())
    })
    .unwrap();
    let want = program.interpret(&inputs);
    let got = run_program(program, &inputs).unwrap();
    for (g, w) in got.iter().zip(&want) {
        compare(g.data(), w.data(), Tol::ulps(DType::F64, 64.0)).unwrap();
    }
}

#[test]
fn custom_calls_with_a_derivative() {
    let inputs = [lit(&[2, 3], 39)];
    check(&inputs, |v| {
        loss(SOFTSIGN_F64.call(&[v[0] * 2.0], &Attrs::new())[0].tanh())
    });
    let program = trace_fn(&inputs, |xs| {
        radix::grad(
            |x: &Tensor, _: &()| loss(SOFTSIGN_F64.call(&[*x], &Attrs::new())[0]),
            &xs[0],
            &(),
        )
    })
    .unwrap();
    let want = program.interpret(&inputs);
    let got = run_program(program, &inputs).unwrap();
    compare(got[0].data(), want[0].data(), Tol::ulps(DType::F64, 8.0)).unwrap();
}

/// A custom call's derivative reads its results, and a called body's
/// derivative runs in two parts: the backward part's result of the call
/// is a residual of the forward part (projected there, not passed as the
/// call itself).
#[test]
fn custom_calls_with_a_derivative_inside_a_called_body() {
    fn body(x: &Tensor) -> Tensor {
        let y = SOFTSIGN_F64.call(&[*x * 2.0], &Attrs::new())[0];
        y * y.tanh()
    }
    let inputs = [lit(&[2, 3], 41)];
    check(&inputs, |v| {
        loss(radix::call("softsign_body", body, &v[0]) * 3.0)
    });
}

#[test]
fn custom_calls_differentiated_through_their_fallback() {
    let inputs = [lit(&[2, 3], 40)];
    let softsign = |x: Tensor| SOFTSIGN_VIA_FALLBACK.call(&[x], &Attrs::new())[0];
    check(&inputs, |v| loss(softsign(v[0] * 2.0).tanh()));
    // Where the gradient flows, the forward pass too runs the fallback's
    // ops; a call no gradient flows through (of the input alone) stays the
    // kernel.
    let program = trace_fn(&inputs, |xs| {
        let (value, g) = radix::value_and_grad(
            |x: &Tensor, c: &Tensor| loss(softsign(*x) * softsign(*c)),
            &xs[0],
            &(xs[0] + 1.0),
        );
        (value, g, softsign(xs[0] - 1.0))
    })
    .unwrap()
    .optimize();
    let text = program.stablehlo_without_locations();
    assert_eq!(text.matches("stablehlo.custom_call").count(), 2, "{text}");
    let want = program.interpret(&inputs);
    let got = run_program(program, &inputs).unwrap();
    for (g, w) in got.iter().zip(&want) {
        compare(g.data(), w.data(), Tol::ulps(DType::F64, 8.0)).unwrap();
    }
    // Without a fallback there is nothing to differentiate.
    let err = CustomCall::builder(
        "radix_test.no_fallback",
        1,
        |s, _| Ok(vec![s[0]]),
        |_| Ok(()),
    )
    .differentiate_fallback()
    .register()
    .unwrap_err();
    assert!(err.to_string().contains("wants a fallback"), "{err}");
}

/// A declared derivative is user code run where the gradient needs it: one
/// that gives the wrong cotangents, or misuses an op, is a trace error at
/// the custom call's line, not a panic.
#[test]
fn a_faulty_declared_derivative_is_a_trace_error_at_the_call() {
    let wrong_count = softsign_builder("radix_test.softsign_two_cotangents")
        .derivative(|_, _, g, _| vec![g[0], g[0]])
        .register()
        .expect("declared");
    let misused = softsign_builder("radix_test.softsign_misused")
        .derivative(|x, _, g, _| vec![g[0] + x[0].reshape(&[2, 2])])
        .register()
        .expect("declared");
    let inputs = [lit(&[4], 42)];
    for (call, says) in [
        (&wrong_count, "not one cotangent per operand"),
        (&misused, "its derivative rule failed"),
    ] {
        let line = line!() + 3;
        let err = trace_fn(&inputs, |v| {
            radix::grad(
                |x: &Tensor, _: &()| call.call(&[*x], &Attrs::new())[0].sum(0),
                &v[0],
                &(),
            )
        })
        .unwrap_err();
        let e = err.as_trace().expect("a trace error");
        assert_eq!((e.op, e.line), ("custom_call", line), "{e}");
        assert!(e.message.contains(says), "{e}");
    }
}

#[test]
fn vjp_takes_output_cotangents() {
    let inputs = [tagged(&[("a", 3)], 31), tagged(&[("a", 3)], 32)];
    let program = trace_fn(&inputs, |v| {
        let (out, g) = radix::vjp(|x: &Tensor, _: &()| x.sin(), &v[0], &(), &v[1]);
        (out, g)
    })
    .unwrap();
    let got = program.interpret(&inputs);
    let want: Vec<f64> = inputs[0]
        .data()
        .iter()
        .zip(inputs[1].data())
        .map(|(x, c)| x.cos() * c)
        .collect();
    compare(got[1].data(), &want, Tol::ulps(DType::F64, 4.0)).unwrap();
}

#[test]
fn an_op_without_a_rule_is_a_trace_error_at_its_line() {
    let f32_input = Literal::new(Shape::new(DType::F32, &[4]), lit(&[4], 33).data().to_vec());
    let err = trace_fn(&[f32_input], |v| {
        radix::grad(
            |x: &Tensor, _: &()| kernels::softsign(*x).sum(0),
            &v[0],
            &(),
        )
    })
    .unwrap_err();
    let e = err.as_trace().expect("a trace error");
    assert_eq!(e.op, "custom_call");
    assert!(e.message.contains("no derivative rule"), "{e}");
    assert!(e.file.ends_with("kernels/mod.rs"), "{e}");
    let inputs = [lit(&[4], 33)];
    // A `while_` (no trip count) has none; the error names the user's line.
    let line = line!() + 4;
    let err = trace_fn(&inputs, |v| {
        radix::grad(
            |x: &Tensor, _: &()| {
                radix::while_(
                    &[*x],
                    |s| s[0].sum(0).lt(Tensor::scalar(9.0, DType::F64)),
                    |s| vec![s[0] * 2.0],
                )[0]
                .sum(0)
            },
            &v[0],
            &(),
        )
    })
    .unwrap_err();
    let e = err.as_trace().expect("a trace error");
    assert_eq!((e.op, e.line), ("while", line), "{e}");
    assert!(e.message.contains("while_bounded(max_trips"), "{e}");
    // A non-scalar loss.
    let err = trace_fn(&inputs, |v| {
        radix::grad(|x: &Tensor, _: &()| *x, &v[0], &())
    })
    .unwrap_err();
    assert!(err.to_string().contains("not a float scalar"), "{err}");
}

#[test]
fn the_plugin_computes_what_the_interpreter_does() {
    let inputs = [
        Literal::new(
            Shape::tagged(DType::F32, &[("i", 4), ("h", 3)]),
            lit(&[4, 3], 34).data().to_vec(),
        ),
        Literal::new(
            Shape::tagged(DType::F32, &[("s", 2), ("i", 4)]),
            lit(&[2, 4], 35).data().to_vec(),
        ),
    ];
    let program = trace_fn(&inputs, |v| {
        radix::value_and_grad(
            |w: &Tensor, x: &Tensor| {
                let h = x.dot(*w, "i").tanh();
                let p = h.softmax("h");
                let ids = Tensor::from_slice(&[1i32, 2], &[2]).with_tags(&["t"]);
                let picked = p.log().gather("h", ids);
                -picked.sum(["s", "t"]) + h.max("h").sum("s")
            },
            &v[0],
            &v[1],
        )
    });
    let program = program.unwrap();
    let want = program.interpret(&inputs);
    let got = run_program(program, &inputs).unwrap();
    for (g, w) in got.iter().zip(&want) {
        compare(
            g.data(),
            w.data(),
            Tol {
                rel: 1e-5,
                abs: 1e-6,
            },
        )
        .unwrap();
    }
}
