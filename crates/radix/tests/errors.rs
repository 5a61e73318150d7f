//! Misuse while tracing comes back from `compile` as an `Err` naming the op,
//! the shapes and the user's source line; wrong arguments at call time too.

use radix::testing::platform;
use radix::{Buffer, DType, Error, Shape, Tensor};

/// Traces `f` on an `{a=2, b=3}` f32 input and returns the trace error as
/// `(op, line, message)`; `line` is relative to `base` (the caller's `line!()`).
fn check(base: u32, f: impl FnOnce(Tensor) -> Tensor) -> (String, u32, String) {
    let x = Tensor::param(Shape::tagged(DType::F32, &[("a", 2), ("b", 3)]));
    let err = radix::compile_fn(&platform(), &x, f)
        .err()
        .expect("a trace error");
    let e = err
        .as_trace()
        .unwrap_or_else(|| panic!("not a trace error: {err}"));
    assert_eq!(e.file, file!());
    (e.op.to_string(), e.line - base, err.to_string())
}

#[test]
fn shape_mismatch_names_the_line() {
    let base = line!();
    let (op, line, msg) = check(base, |x| {
        let y = x.transpose(["b", "a"]);
        x + y
    });
    assert_eq!((op.as_str(), line), ("add", 3));
    assert!(msg.contains("dims differ: [2, 3] and [3, 2]"), "{msg}");
    assert!(msg.contains("{a=2, b=3, f32}, {b=3, a=2, f32}"), "{msg}");
}

#[test]
fn missing_tag_dtype_and_rank_errors() {
    let base = line!();
    let (op, line, msg) = check(base, |x| x.sum("c"));
    assert_eq!((op.as_str(), line), ("sum", 1));
    assert!(msg.contains("no axis .c"), "{msg}");

    let base = line!();
    let (op, line, _) = check(base, |x| x.convert(DType::I32).exp());
    assert_eq!((op.as_str(), line), ("exponential", 1));

    let base = line!();
    let (op, line, _) = check(base, |x| x.reshape(&[4, 2]));
    assert_eq!((op.as_str(), line), ("reshape", 1));

    let base = line!();
    let (op, line, msg) = check(base, |x| {
        let w = Tensor::zeros(Shape::tagged(DType::F32, &[("b", 4), ("c", 2)]));
        x.dot(w, "b")
    });
    assert_eq!((op.as_str(), line), ("dot", 3));
    assert!(msg.contains("differ in size: 3 and 4"), "{msg}");
}

#[test]
fn bitcast_and_shift_misuse() {
    // f32 to f64 consumes a last axis of size 2; this one has 3.
    let base = line!();
    let (op, line, msg) = check(base, |x| x.bitcast(DType::F64));
    assert_eq!((op.as_str(), line), ("bitcast", 1));
    assert!(msg.contains("the last axis must have size 2"), "{msg}");

    let base = line!();
    let (op, line, msg) = check(base, |x| x.gt(x).bitcast(DType::U8));
    assert_eq!((op.as_str(), line), ("bitcast", 1));
    assert!(msg.contains("bools bitcast to bools only"), "{msg}");

    let base = line!();
    let (op, line, msg) = check(base, |x| x.shift_left(x));
    assert_eq!((op.as_str(), line), ("shift_left", 1));
    assert!(msg.contains("not defined on f32"), "{msg}");
}

#[test]
fn missing_axis_is_an_error_not_a_size() {
    let base = line!();
    let (op, line, msg) = check(base, |x| {
        let n = x.dim("h");
        x.split_axis("b", &[("h", n.into()), ("hd", radix::Size::Auto)])
    });
    assert_eq!((op.as_str(), line), ("dim", 2));
    assert!(msg.contains("no axis .h"), "{msg}");

    let base = line!();
    let (op, line, msg) = check(base, |x| {
        x.split_axis("b", &[("h", 2.into()), ("hd", radix::Size::Auto)])
    });
    assert_eq!((op.as_str(), line), ("split_axis", 2));
    assert!(msg.contains("cannot split axis .b"), "{msg}");
}

#[test]
fn first_error_wins_and_tracing_continues() {
    let base = line!();
    let (op, line, _) = check(base, |x| {
        let bad = x.slice("a", 0..5);
        let worse = bad.matmul(bad).sum("zz");
        worse + x
    });
    assert_eq!((op.as_str(), line), ("slice", 2));
}

#[test]
fn captured_tensor_is_an_error() {
    let outside = Tensor::param(Shape::new(DType::F32, &[2, 3]));
    let base = line!();
    let (_, line, msg) = check(base, |x| x * outside);
    assert_eq!(line, 1);
    assert!(msg.contains("Tensor::param"), "{msg}");
}

#[test]
fn wrong_call_arguments() {
    let platform = platform();
    let x = Tensor::param(Shape::tagged(DType::F32, &[("a", 2)]));
    let exe = radix::compile_fn(&platform, &(x, x), |(x, y)| x + y).unwrap();
    let good = Buffer::from_slice(&platform, &[1f32, 2.], x.shape()).unwrap();
    let bad = Buffer::from_slice(&platform, &[1f32, 2., 3.], Shape::new(DType::F32, &[3])).unwrap();
    match exe.call_fn((good.clone(), bad)) {
        Err(Error::Argument {
            index,
            path,
            expected,
            got,
        }) => {
            assert_eq!((index, path.as_str()), (1, "input.1"));
            assert_eq!(
                (expected.as_str(), got.as_str()),
                ("{a=2, f32}", "{3, f32}")
            );
        }
        other => panic!("expected an argument error, got {other:?}"),
    }
    let ints = Buffer::from_slice(&platform, &[1i32, 2], Shape::new(DType::I32, &[2])).unwrap();
    assert!(matches!(
        exe.call_fn((ints, good.clone())),
        Err(Error::Argument { index: 0, .. })
    ));
    assert!(matches!(
        exe.executable().call(&[&good]),
        Err(Error::ArgumentCount {
            expected: 2,
            got: 1,
            ..
        })
    ));
    let sum = exe.call_fn((good.clone(), good)).unwrap();
    assert_eq!(sum.to_vec::<f32>().unwrap(), vec![2., 4.]);
    assert!(matches!(sum.to_vec::<i32>(), Err(Error::Host(_))));
}

#[test]
fn misshapen_weights() {
    let platform = platform();
    let w = vec![Tensor::param(Shape::tagged(DType::F32, &[("a", 2)])); 2];
    let x = w[0];
    let exe = radix::compile(&platform, &w, &x, |w, x| w[0] * w[1] * x).unwrap();
    let buf = Buffer::from_slice(&platform, &[3f32, 4.], x.shape()).unwrap();
    // A tree of another length than the model's.
    assert!(matches!(
        exe.call(&vec![buf.clone()], buf.clone()),
        Err(Error::ArgumentCount {
            what: "weights",
            expected: 2,
            got: 1,
        })
    ));
    let short = Buffer::from_slice(&platform, &[3f32], Shape::new(DType::F32, &[1])).unwrap();
    match exe.call(&vec![buf.clone(), short], buf.clone()) {
        Err(Error::Argument { index: 1, path, .. }) => assert_eq!(path, "1"),
        other => panic!("{other:?}"),
    }
    let one = Buffer::from_slice(&platform, &[1f32, 1.], x.shape()).unwrap();
    assert_eq!(
        exe.call(&vec![buf.clone(), one], buf)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![9., 16.]
    );
}
