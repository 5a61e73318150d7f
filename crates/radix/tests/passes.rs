//! The passes before hashing: programs written differently but equal print
//! and hash equal, and keep their values.

use expect_test::{Expect, expect};
use radix::testing::{Tol, platform, run, trace_fn};
use radix::{CompileConfig, DType, Literal, Program, Shape, Tensor};

fn x_literal() -> Literal {
    Literal::from_slice(&[1f32, -2., 3., 4.5, -0.5, 6.], &[2, 3])
}

/// `f` traced and optimized.
fn program(f: impl FnOnce(Tensor) -> Tensor) -> Program {
    trace_fn(&[x_literal()], |xs| f(xs[0])).unwrap().optimize()
}

/// `a` and `b` print equal without locations, have the same cache key, and
/// compute the same values; `a` prints as `want`.
fn check_equal(a: impl FnOnce(Tensor) -> Tensor, b: impl FnOnce(Tensor) -> Tensor, want: Expect) {
    let (pa, pb) = (program(a), program(b));
    want.assert_eq(&pa.stablehlo_without_locations());
    assert_eq!(
        pa.stablehlo_without_locations(),
        pb.stablehlo_without_locations()
    );
    let platform = platform();
    let config = CompileConfig::new(&platform);
    assert_eq!(
        radix::cache_key(&platform, &pa, &config).unwrap(),
        radix::cache_key(&platform, &pb, &config).unwrap()
    );
    let inputs = [x_literal()];
    let (ra, rb) = (
        radix::testing::run_program(pa, &inputs).unwrap(),
        radix::testing::run_program(pb, &inputs).unwrap(),
    );
    assert_eq!(ra, rb);
}

#[test]
fn identities_vanish() {
    check_equal(
        |x| ((x + 0.0) * 1.0 - 0.0) / 1.0,
        |x| x,
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}) -> (tensor<2x3xf32>) {
                "func.return"(%arg0) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
    check_equal(
        |x| (0.0 + x.exp()) * 1.0,
        |x| 1.0 * x.exp(),
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
                %0 = "stablehlo.exponential"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
                "func.return"(%0) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
    check_equal(
        |x| {
            x.convert(DType::F32)
                .reshape(&[3, 2])
                .reshape(&[6])
                .reshape(&[2, 3])
        },
        |x| x,
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}) -> (tensor<2x3xf32>) {
                "func.return"(%arg0) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
    check_equal(
        |x| x.transpose([1, 0]).transpose([1, 0]),
        |x| x,
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}) -> (tensor<2x3xf32>) {
                "func.return"(%arg0) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
    check_equal(
        |x| x.reshape(&[3, 2]).reshape(&[6]),
        |x| x.reshape(&[6]),
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<6xf32>) {
                %0 = "stablehlo.reshape"(%arg0) : (tensor<2x3xf32>) -> tensor<6xf32>
                "func.return"(%0) : (tensor<6xf32>) -> ()
              }
            }
        "#]],
    );
}

#[test]
fn constants_fold_with_reference_semantics() {
    check_equal(
        |x| x * ((Tensor::scalar(2.0, DType::F32) + 3.0).exp().log()),
        |x| x * 5.0,
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
                %0 = "stablehlo.constant"() {value = dense<"0x0000A040"> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
                %1 = "stablehlo.multiply"(%arg0, %0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                "func.return"(%1) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
    // A small non-splat constant folds through several ops; a constant
    // written out element by element with equal elements becomes a splat.
    check_equal(
        |x| {
            let c = Tensor::from_slice(&[1f32, 2., 3.], &[3]);
            x + (c * 2.0 - c).broadcast_in_dim(x.shape(), &[1])
        },
        |x| x + Tensor::from_slice(&[1f32, 2., 3., 1., 2., 3.], &[2, 3]),
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
                %0 = "stablehlo.constant"() {value = dense<"0x0000803F00000040000040400000803F0000004000004040"> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
                %1 = "stablehlo.add"(%arg0, %0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                "func.return"(%1) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
    check_equal(
        |x| x + Tensor::from_slice(&[7f32; 6], &[2, 3]),
        |x| x + 7.0,
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
                %0 = "stablehlo.constant"() {value = dense<"0x0000E040"> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
                %1 = "stablehlo.add"(%arg0, %0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                "func.return"(%1) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
}

#[test]
fn common_subexpressions_merge() {
    check_equal(
        |x| x.exp() * x.exp() + (x + 1.0).tanh() - (x + 1.0).tanh(),
        |x| {
            let e = x.exp();
            let t = (x + 1.0).tanh();
            e * e + t - t
        },
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
                %0 = "stablehlo.exponential"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
                %1 = "stablehlo.multiply"(%0, %0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                %2 = "stablehlo.constant"() {value = dense<"0x0000803F"> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
                %3 = "stablehlo.add"(%arg0, %2) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                %4 = "stablehlo.tanh"(%3) : (tensor<2x3xf32>) -> tensor<2x3xf32>
                %5 = "stablehlo.add"(%1, %4) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                %6 = "stablehlo.subtract"(%5, %4) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                "func.return"(%6) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
}

#[test]
fn reductions_with_equal_bodies_merge_wherever_traced() {
    // Two user bodies on two lines (two closures): the ops are equal by
    // structure, so CSE keeps one reduce.
    let p = program(|x| {
        let zero = || Tensor::scalar(0.0, DType::F32);
        let a = radix::reduce(&[x], &[zero()], 1, |a, b| vec![a[0] + b[0]])[0];
        let b = radix::reduce(&[x], &[zero()], 1, |a, b| vec![a[0] + b[0]])[0];
        a * b
    });
    let text = p.stablehlo_without_locations();
    assert_eq!(text.matches("stablehlo.reduce").count(), 1, "{text}");
}

#[test]
fn commutative_operands_take_one_order() {
    // `e + t` and `t + e` are one node: the module has one add.
    let both = program(|x| {
        let (e, t) = (x.exp(), x.tanh());
        (e + t) * (t + e)
    });
    let text = both.stablehlo_without_locations();
    assert_eq!(text.matches("stablehlo.add").count(), 1, "{text}");
    // The order depends on the graph, not on the order of operands or of
    // tracing; constants go to the right.
    check_equal(
        |x| {
            let (e, t) = (x.exp(), x.tanh());
            (e + t).maximum(x) * 2.0
        },
        |x| {
            let t = x.tanh();
            let e = x.exp();
            2.0 * x.maximum(t + e)
        },
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
                %0 = "stablehlo.exponential"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
                %1 = "stablehlo.tanh"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
                %2 = "stablehlo.add"(%0, %1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                %3 = "stablehlo.maximum"(%arg0, %2) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                %4 = "stablehlo.constant"() {value = dense<"0x00000040"> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
                %5 = "stablehlo.multiply"(%3, %4) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                "func.return"(%5) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
    check_equal(
        |x| x.exp().eq(x).select(x, x.exp()),
        |x| x.eq(x.exp()).select(x, x.exp()),
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
                %0 = "stablehlo.exponential"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
                %1 = "stablehlo.compare"(%arg0, %0) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
                %2 = "stablehlo.select"(%1, %arg0, %0) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
                "func.return"(%2) : (tensor<2x3xf32>) -> ()
              }
            }
        "#]],
    );
}

#[test]
fn identities_come_from_the_op_table() {
    let ints = [Literal::from_slice(&[3i32, -1, 4], &[3])];
    let program = trace_fn(&ints, |xs| {
        let zero = Tensor::scalar(0.0, DType::I32);
        let one = Tensor::scalar(1.0, DType::I32);
        (zero.or(xs[0]).xor(zero) + zero).pow(one)
    })
    .unwrap()
    .optimize();
    expect![[r#"
        module @radix {
          func.func @main(%arg0: tensor<3xi32> {tf.aliasing_output = 0 : i32}) -> (tensor<3xi32>) {
            "func.return"(%arg0) : (tensor<3xi32>) -> ()
          }
        }
    "#]]
    .assert_eq(&program.stablehlo_without_locations());
}

#[test]
fn locations_do_not_change_the_key() {
    let a = program(|x| x.exp());
    let b = program(|x| {
        // Another line, another column.
        x.exp()
    });
    assert_ne!(a.stablehlo(), b.stablehlo());
    assert_eq!(
        a.stablehlo_without_locations(),
        b.stablehlo_without_locations()
    );
    let platform = platform();
    let config = CompileConfig::new(&platform);
    assert_eq!(
        radix::cache_key(&platform, &a, &config).unwrap(),
        radix::cache_key(&platform, &b, &config).unwrap()
    );
}

#[test]
fn merged_nodes_keep_the_first_location() {
    let line = line!() + 2;
    let p = program(|x| {
        let a = x.exp();
        let b = x.exp();
        a + b
    });
    let text = p.stablehlo();
    let exp = text
        .lines()
        .find(|l| l.contains("stablehlo.exponential"))
        .unwrap();
    assert!(exp.contains(&format!("passes.rs\":{line}:")), "{exp}");
    assert_eq!(text.matches("stablehlo.exponential").count(), 1);
}

#[test]
fn folded_values_match_the_plugin() {
    // The same arithmetic folded at trace time and computed by XLA.
    let folded = run(&[], |_| {
        (Tensor::from_slice(&[0.5f32, 1.5, -2.0, 3.0], &[4]).exp() * 3.0).sqrt()
    })
    .unwrap();
    let computed = run(
        &[Literal::from_slice(&[0.5f32, 1.5, -2.0, 3.0], &[4])],
        |xs| (xs[0].exp() * 3.0).sqrt(),
    )
    .unwrap();
    radix::testing::assert_close(&folded[0], computed[0].data(), Tol::F32);
    // 64-bit integers beyond 2^53 are not folded (f64 would round them).
    let big = (1i64 << 60) + 1;
    let p = trace_fn(&[], |_| Tensor::from_slice(&[big], &[1]) + 1.0)
        .unwrap()
        .optimize();
    assert!(p.stablehlo().contains("stablehlo.add"));
    let res = radix::testing::run_program(p, &[]).unwrap();
    assert_eq!(res[0].shape(), Shape::new(DType::I64, &[1]));
}
