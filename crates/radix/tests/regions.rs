//! Ops with hermetic scalar bodies: `reduce` (and sum/max/min/argmax on
//! it), `reduce_window` (cumsum, max-pool), `sort`/`argsort`/`top_k` and
//! `scatter` with an update function. Every number is checked through the
//! CPU plugin and the reference interpreter (`check`).

use expect_test::expect;
use radix::testing::{Tol, check, trace_fn};
use radix::{DType, Literal, Order, Shape, Tensor, Window, reduce, sort};

/// `[[1, 2, 3], [4, 5, 6]]` tagged `(b, d)`.
fn bd() -> [Literal; 1] {
    [Literal::new(
        Shape::tagged(DType::F32, &[("b", 2), ("d", 3)]),
        vec![1., 2., 3., 4., 5., 6.],
    )]
}

fn f32s(v: &[f32]) -> Literal {
    Literal::from_slice(v, &[v.len() as i64])
}

#[test]
fn reduce_with_a_user_body() {
    let one = || Tensor::scalar(1.0, DType::F32);
    let zero = || Tensor::scalar(0.0, DType::F32);
    // Product: 1*2*3 = 6, 4*5*6 = 120.
    let p = check(
        &bd(),
        |x| x[0].reduce(one(), "d", |a, b| a * b),
        &[6., 120.],
        Tol::EXACT,
    );
    assert_eq!(p.shape(), Shape::tagged(DType::F32, &[("b", 2)]));
    // Sum of squares: square first, the body only adds.
    check(
        &bd(),
        |x| (x[0] * x[0]).reduce(zero(), "d", |a, b| a + b),
        &[14., 77.],
        Tol::EXACT,
    );
    // Over both axes, with a body that makes its own constant.
    check(
        &bd(),
        |x| x[0].reduce(zero(), ["b", "d"], |a, b| (a + b * 2.0) - b),
        &[21.],
        Tol::EXACT,
    );
}

#[test]
fn variadic_reduce_gives_one_result_per_operand() {
    // Sum and max together over "d".
    let f = |x: &[Tensor]| {
        let inits = [
            Tensor::scalar(0.0, DType::F32),
            Tensor::scalar(f64::NEG_INFINITY, DType::F32),
        ];
        reduce(&[x[0], x[0]], &inits, "d", |acc, v| {
            vec![acc[0] + v[0], acc[1].maximum(v[1])]
        })
    };
    check(&bd(), |x| f(x)[0], &[6., 15.], Tol::EXACT);
    check(&bd(), |x| f(x)[1], &[3., 6.], Tol::EXACT);
}

#[test]
fn sum_max_min_argmax_on_reduce() {
    let x = [Literal::new(
        Shape::tagged(DType::F32, &[("b", 3), ("d", 4)]),
        vec![
            1.,
            3.,
            3.,
            0.,
            -5.,
            -2.,
            -7.,
            -2.,
            0.,
            f64::NAN,
            4.,
            f64::NAN,
        ],
    )];
    check(
        &x,
        |x| x[0].sum("d").slice("b", 0..2),
        &[7., -16.],
        Tol::EXACT,
    );
    check(
        &x,
        |x| x[0].max("d").slice("b", 0..2),
        &[3., -2.],
        Tol::EXACT,
    );
    check(
        &x,
        |x| x[0].min("d").slice("b", 0..2),
        &[0., -7.],
        Tol::EXACT,
    );
    // Ties pick the first; the first NaN wins.
    let a = check(&x, |x| x[0].argmax("d"), &[1., 1., 1.], Tol::EXACT);
    assert_eq!(a.shape(), Shape::tagged(DType::I32, &[("b", 3)]));
    let i = [Literal::from_slice(&[2i32, 9, 9, -1, -4, -4], &[2, 3])];
    check(&i, |x| x[0].argmax(1), &[1., 0.], Tol::EXACT);
    check(&i, |x| x[0].argmax(0), &[0., 0., 0.], Tol::EXACT);
}

#[test]
fn reduce_text_and_equal_reductions_merge() {
    let program = trace_fn(&[f32s(&[1., 2.])], |x| {
        let a = x[0].sum(0);
        let b = x[0].sum(0);
        a + b
    })
    .unwrap();
    expect![[r#"
        module @radix {
          func.func @main(%arg0: tensor<2xf32>) -> (tensor<f32>) {
            %0 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32>
            %1 = "stablehlo.reduce"(%arg0, %0) ({
              ^bb0(%r1_0_a0: tensor<f32>, %r1_0_a1: tensor<f32>):
            %r1_0_0 = "stablehlo.add"(%r1_0_a0, %r1_0_a1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
            "stablehlo.return"(%r1_0_0) : (tensor<f32>) -> ()
            }) {dimensions = array<i64: 0>} : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
            %2 = "stablehlo.add"(%1, %1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
            "func.return"(%2) : (tensor<f32>) -> ()
          }
        }
    "#]]
    .assert_eq(&program.optimize().stablehlo_without_locations());
}

#[test]
fn a_capture_in_a_body_is_an_error() {
    let err = trace_fn(&bd(), |x| {
        let outer = x[0].sum("d").sum("b");
        x[0].reduce(Tensor::scalar(0.0, DType::F32), "d", |a, b| a + b + outer)
    })
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("captured by a hermetic reduce body") && msg.contains("regions.rs"),
        "{msg}"
    );
    let err = trace_fn(&bd(), |x| {
        x[0].reduce(Tensor::scalar(0.0, DType::F32), "d", |a, b| a.lt(b))
    })
    .unwrap_err();
    assert!(err.to_string().contains("the body gives"), "{err}");
}

#[test]
fn cumsum_is_a_reduce_window() {
    let c = check(
        &bd(),
        |x| x[0].cumsum("d"),
        &[1., 3., 6., 4., 9., 15.],
        Tol::EXACT,
    );
    assert_eq!(c.shape(), bd()[0].shape());
    check(
        &bd(),
        |x| x[0].cumsum("b"),
        &[1., 2., 3., 5., 7., 9.],
        Tol::EXACT,
    );
    let i = [Literal::from_slice(&[1i32, 2, 3, 4], &[4])];
    check(&i, |x| x[0].cumsum(0), &[1., 3., 6., 10.], Tol::EXACT);
}

#[test]
fn max_pool_2x2_stride_2_with_padding() {
    // -1 -2 -3
    // -4 -5 -6     padded after with one row and column (never chosen)
    // -7 -8 -9
    let x = [Literal::new(
        Shape::tagged(DType::F32, &[("h", 3), ("w", 3)]),
        (1..=9).map(|v| -(v as f64)).collect(),
    )];
    let window = Window {
        dims: vec![2, 2],
        strides: vec![2, 2],
        padding: vec![[0, 1], [0, 1]],
    };
    let m = check(
        &x,
        |x| x[0].max_pool(&window),
        &[-1., -3., -7., -9.],
        Tol::EXACT,
    );
    assert_eq!(m.shape(), Shape::tagged(DType::F32, &[("h", 2), ("w", 2)]));
    // Window sums with padding in front: [0+1, 1+2+3, 3+4+5] over [1..5].
    let sums = Window {
        dims: vec![3],
        strides: vec![2],
        padding: vec![[1, 0]],
    };
    check(
        &[f32s(&[1., 2., 3., 4., 5.])],
        |x| x[0].reduce_window(Tensor::scalar(0.0, DType::F32), &sums, |a, b| a + b),
        &[3., 9.],
        Tol::EXACT,
    );
    let err = trace_fn(&x, |x| {
        let bad = Window {
            dims: vec![4, 1],
            strides: vec![1, 1],
            padding: vec![[0, 0], [0, 0]],
        };
        x[0].max_pool(&bad)
    })
    .unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
}

#[test]
fn sort_ascending_descending_and_by_several_keys() {
    let x = [Literal::new(
        Shape::tagged(DType::F32, &[("b", 2), ("d", 3)]),
        vec![3., 1., 2., -1., 5., 0.],
    )];
    let s = check(
        &x,
        |x| x[0].sort("d", Order::Ascending),
        &[1., 2., 3., -1., 0., 5.],
        Tol::EXACT,
    );
    assert_eq!(s.shape(), x[0].shape());
    check(
        &x,
        |x| x[0].sort("d", Order::Descending),
        &[3., 2., 1., 5., 0., -1.],
        Tol::EXACT,
    );
    check(
        &x,
        |x| x[0].sort("b", Order::Ascending),
        &[-1., 1., 0., 3., 5., 2.],
        Tol::EXACT,
    );
    // Keys descending, then values ascending; the values follow.
    let kv = [
        Literal::from_slice(&[1i32, 2, 1, 2, 0], &[5]),
        f32s(&[10., 40., 5., 20., 7.]),
    ];
    let by_keys = |x: &[Tensor]| {
        sort(&[x[0], x[1]], 0, |l, r| {
            l[0].gt(r[0]).or(l[0].eq(r[0]).and(l[1].lt(r[1])))
        })
    };
    check(&kv, |x| by_keys(x)[0], &[2., 2., 1., 1., 0.], Tol::EXACT);
    check(&kv, |x| by_keys(x)[1], &[20., 40., 5., 10., 7.], Tol::EXACT);
}

#[test]
fn argsort_is_stable() {
    let x = [f32s(&[3., 1., 2., 1.])];
    let a = check(
        &x,
        |x| x[0].argsort(0, Order::Ascending),
        &[1., 3., 2., 0.],
        Tol::EXACT,
    );
    assert_eq!(a.shape(), Shape::new(DType::I32, &[4]));
    check(
        &x,
        |x| x[0].argsort(0, Order::Descending),
        &[0., 2., 1., 3.],
        Tol::EXACT,
    );
}

#[test]
fn top_k_values_and_indices() {
    let x = [Literal::new(
        Shape::tagged(DType::F32, &[("b", 2), ("d", 4)]),
        vec![1., 5., 3., 5., 0., -1., 7., 2.],
    )];
    let v = check(&x, |x| x[0].top_k("d", 2).0, &[5., 5., 7., 2.], Tol::EXACT);
    assert_eq!(v.shape(), Shape::tagged(DType::F32, &[("b", 2), ("d", 2)]));
    let i = check(&x, |x| x[0].top_k("d", 2).1, &[1., 3., 2., 3.], Tol::EXACT);
    assert_eq!(i.shape(), Shape::tagged(DType::I32, &[("b", 2), ("d", 2)]));
}

/// Rows 0, 1, 10, 11, 20, 21, 30, 31 tagged `(voc, d)`.
fn table() -> Literal {
    Literal::new(
        Shape::tagged(DType::F32, &[("voc", 4), ("d", 2)]),
        vec![0., 1., 10., 11., 20., 21., 30., 31.],
    )
}

#[test]
fn scatter_overrides_adds_and_accumulates_duplicates() {
    let ids = Literal::from_slice(&[3i32, 1], &[2]);
    let upd = Literal::new(Shape::new(DType::F32, &[2, 2]), vec![-1., -2., -3., -4.]);
    check(
        &[table(), ids, upd],
        |x| x[0].scatter("voc", x[1], x[2]),
        &[0., 1., -3., -4., 20., 21., -1., -2.],
        Tol::EXACT,
    );
    // Row 3 gets 1+5 and 2+6; row 1 gets 3 and 4; 7 is out of range.
    let ids = Literal::from_slice(&[3i32, 1, 3, 7], &[4]);
    let upd = Literal::new(
        Shape::new(DType::F32, &[4, 2]),
        vec![1., 2., 3., 4., 5., 6., 100., 100.],
    );
    let inputs = [table(), ids, upd];
    check(
        &inputs,
        |x| x[0].scatter_add("voc", x[1], x[2]),
        &[0., 1., 13., 15., 20., 21., 36., 39.],
        Tol::EXACT,
    );
    // A user update function: the smaller of old and new.
    check(
        &inputs,
        |x| x[0].scatter_with("voc", x[1], x[2], |old, new| old.minimum(new)),
        &[0., 1., 3., 4., 20., 21., 1., 2.],
        Tol::EXACT,
    );
}
