//! Blocks and control flow: `while_`, `for_`, `if_`, open and hermetic blocks.

use expect_test::expect;
use radix::testing::{Tol, check, trace_fn};
use radix::{DType, Literal, Shape, Tensor, for_, if_, while_};

fn i32s(v: &[i32]) -> Literal {
    Literal::from_slice(v, &[v.len() as i64])
}

#[test]
fn while_sums_with_a_captured_bound() {
    // acc = sum of 0..n, the condition captures `n` from the enclosing code.
    let n = [Literal::from_slice(&[10i32], &[])];
    check(
        &n,
        |x| {
            let n = x[0];
            let zero = Tensor::scalar(0.0, DType::I32);
            let res = while_(
                &[zero, zero],
                |s| s[0].lt(n),
                |s| vec![s[0] + Tensor::scalar(1.0, DType::I32), s[1] + s[0]],
            );
            res[1]
        },
        &[45.],
        Tol::EXACT,
    );
}

/// `s * x` while `sum(s) < 100`, from `x = [1, 2]`: the text, and the
/// result `[1, 128]` (from the plugin and the interpreter).
#[test]
fn while_text() {
    let body = |x: &[Tensor]| {
        while_(
            &[x[0]],
            |s| s[0].sum(0).lt(Tensor::scalar(100.0, DType::I32)),
            |s| vec![s[0] * x[0]],
        )
    };
    check(&[i32s(&[1, 2])], |x| body(x)[0], &[1., 128.], Tol::EXACT);
    let program = trace_fn(&[i32s(&[1, 2])], body).unwrap();
    expect![[r#"
        module @radix {
          func.func @main(%arg0: tensor<2xi32>) -> (tensor<2xi32>) {
            %0:1 = "stablehlo.while"(%arg0) ({
              ^bb0(%r0_0_a0: tensor<2xi32>):
            %r0_0_0 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<i32>} : () -> tensor<i32>
            %r0_0_1 = "stablehlo.reduce"(%r0_0_a0, %r0_0_0) ({
              ^bb0(%rr0_0_1_0_a0: tensor<i32>, %rr0_0_1_0_a1: tensor<i32>):
            %rr0_0_1_0_0 = "stablehlo.add"(%rr0_0_1_0_a0, %rr0_0_1_0_a1) : (tensor<i32>, tensor<i32>) -> tensor<i32>
            "stablehlo.return"(%rr0_0_1_0_0) : (tensor<i32>) -> ()
            }) {dimensions = array<i64: 0>} : (tensor<2xi32>, tensor<i32>) -> tensor<i32>
            %r0_0_2 = "stablehlo.constant"() {value = dense<"0x64000000"> : tensor<i32>} : () -> tensor<i32>
            %r0_0_3 = "stablehlo.compare"(%r0_0_1, %r0_0_2) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<i32>, tensor<i32>) -> tensor<i1>
            "stablehlo.return"(%r0_0_3) : (tensor<i1>) -> ()
            }, {
              ^bb0(%r0_1_a0: tensor<2xi32>):
            %r0_1_0 = "stablehlo.multiply"(%r0_1_a0, %arg0) : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
            "stablehlo.return"(%r0_1_0) : (tensor<2xi32>) -> ()
            }) : (tensor<2xi32>) -> (tensor<2xi32>)
            "func.return"(%0#0) : (tensor<2xi32>) -> ()
          }
        }
    "#]]
    .assert_eq(&program.clone().optimize().stablehlo_without_locations());
    radix::testing::run_program(program, &[i32s(&[1, 2])]).unwrap();
}

#[test]
fn for_stacks_per_step_results() {
    // state += x each step; per step output: state * i.
    let x = [Literal::new(
        Shape::tagged(DType::F32, &[("d", 2)]),
        vec![1., 2.],
    )];
    let run = |x: &[Tensor]| {
        for_(3, "step", &[x[0]], |i, s| {
            let next = s[0] + x[0];
            let out = next * i.convert(DType::F32).broadcast(next.shape());
            (vec![next], vec![out])
        })
    };
    check(&x, |x| run(x).0[0], &[4., 8.], Tol::EXACT);
    let out = check(&x, |x| run(x).1[0], &[0., 0., 3., 6., 8., 16.], Tol::EXACT);
    assert_eq!(
        out.shape(),
        Shape::tagged(DType::F32, &[("step", 3), ("d", 2)])
    );
}

#[test]
fn if_picks_a_branch_and_checks_shapes() {
    let x = |v: f32| {
        [Literal::new(
            Shape::tagged(DType::F32, &[("d", 2)]),
            vec![v as f64, 1.],
        )]
    };
    let f = |x: &[Tensor]| {
        let pred = x[0].sum("d").gt(Tensor::scalar(0.0, DType::F32));
        if_(pred, || vec![x[0] * 2.0], || vec![-x[0]])[0]
    };
    check(&x(3.), f, &[6., 2.], Tol::EXACT);
    check(&x(-3.), f, &[3., -1.], Tol::EXACT);
    let err = trace_fn(&x(1.), |x| {
        let pred = x[0].sum("d").gt(Tensor::scalar(0.0, DType::F32));
        if_(pred, || vec![x[0]], || vec![x[0].rename("d", "e")])[0]
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("if: the branches give [{d=2, f32}] and [{e=2, f32}]"),
        "{err}"
    );
}

#[test]
fn a_capture_in_a_hermetic_block_is_an_error() {
    let x = [Literal::new(
        Shape::tagged(DType::F32, &[("d", 2)]),
        vec![1., 2.],
    )];
    // A `fn` cannot capture; smuggle the outer tensor in through a thread-local.
    thread_local!(static OUTER: std::cell::Cell<Option<Tensor>> = const { std::cell::Cell::new(None) });
    fn outer_of() -> Tensor {
        OUTER.with(|o| o.get().unwrap())
    }
    let err = trace_fn(&x, |x| {
        OUTER.with(|o| o.set(Some(x[0])));
        radix::call("outer", |y: &Tensor| *y + outer_of(), &x[0])
    })
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("control_flow.rs"), "{msg}");
    assert!(
        msg.contains("of an enclosing block is captured by a hermetic called function"),
        "{msg}"
    );
}

/// A value captured by an open block keeps the tags of each handle that
/// uses it: `rename` emits no op, so two handles of one value may differ
/// in tags, and the block's second use (here renamed) must see its own.
#[test]
fn a_captured_value_keeps_each_handles_tags() {
    let x = [Literal::new(
        Shape::tagged(DType::F32, &[("s", 2)]),
        vec![1., 2.],
    )];
    let program = trace_fn(&x, |x| {
        let s = x[0];
        let out = while_(
            &[Tensor::scalar(0.0, DType::F32)],
            |st| st[0].lt(Tensor::scalar(1.0, DType::F32)),
            |st| {
                // Captured with `s` first, then used renamed to `q`.
                let by_s = s.sum("s");
                let q = s.rename("s", "q") * 2.0;
                assert_eq!(q.shape().to_string(), "{q=2, f32}");
                vec![st[0] + by_s + q.sum("q")]
            },
        );
        out[0]
    })
    .unwrap();
    let got = program.interpret(&x);
    assert_eq!(got[0].to_vec::<f32>(), [9.0]);
}
