//! Tracing, printing, compiling and calling whole programs.

use expect_test::{Expect, expect};
use radix::testing::platform;
use radix::{Buffer, DType, Module, Shape, Tensor};

/// A linear layer.
#[derive(Clone, Module)]
struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
    #[module(skip)]
    _name: &'static str,
    n_out: usize,
}

impl Linear {
    fn new(d_in: i64, d_out: i64) -> Linear {
        Linear {
            weight: Tensor::param(Shape::tagged(DType::F32, &[("dout", d_out), ("d", d_in)])),
            bias: Some(Tensor::param(Shape::tagged(DType::F32, &[("dout", d_out)]))),
            _name: "linear",
            n_out: d_out as usize,
        }
    }

    fn forward(&self, x: Tensor) -> Tensor {
        let y = x.dot(self.weight, "d");
        let y = match self.bias {
            Some(b) => y + b.broadcast(y.shape()),
            None => y,
        };
        y.rename("dout", "d")
    }
}

#[derive(Clone, Module)]
struct Stack {
    layers: Vec<Linear>,
    extra: [Option<Tensor>; 2],
    pair: (Tensor, f32),
}

fn check_stablehlo(f: impl FnOnce(Tensor) -> Tensor, x: Shape, want: Expect) {
    let program = radix::trace_fn(&Tensor::param(x), f).unwrap();
    want.assert_eq(&program.optimize().stablehlo());
}

#[test]
fn module_paths_in_declaration_order() {
    let stack = Stack {
        layers: vec![Linear::new(3, 4), Linear::new(4, 4)],
        extra: [None, Some(Tensor::param(Shape::new(DType::I32, &[])))],
        pair: (Tensor::param(Shape::new(DType::F32, &[1])), 1.0),
    };
    let paths: Vec<String> = radix::module::tensors(&stack)
        .into_iter()
        .map(|(p, t)| format!("{p}: {}", t.shape()))
        .collect();
    expect![[r#"
        layers.0.weight: {dout=4, d=3, f32}
        layers.0.bias: {dout=4, f32}
        layers.1.weight: {dout=4, d=4, f32}
        layers.1.bias: {dout=4, f32}
        extra.1: {i32}
        pair.0: {1, f32}"#]]
    .assert_eq(&paths.join("\n"));
}

#[test]
fn prints_generic_stablehlo_with_locations() {
    check_stablehlo(
        |x| (x * 2.0).sum("d"),
        Shape::tagged(DType::F32, &[("b", 2), ("d", 3)]),
        expect![[r#"
            module @radix {
              func.func @main(%arg0: tensor<2x3xf32> loc("crates/radix/tests/compile.rs":45:19)) -> (tensor<2xf32>) {
                %0 = "stablehlo.constant"() {value = dense<"0x00000040"> : tensor<2x3xf32>} : () -> tensor<2x3xf32> loc("crates/radix/tests/compile.rs":73:13)
                %1 = "stablehlo.multiply"(%arg0, %0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("crates/radix/tests/compile.rs":73:13)
                %2 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32> loc("crates/radix/tests/compile.rs":73:23)
                %3 = "stablehlo.reduce"(%1, %2) ({
                  ^bb0(%r3_0_a0: tensor<f32>, %r3_0_a1: tensor<f32>):
                %r3_0_0 = "stablehlo.add"(%r3_0_a0, %r3_0_a1) : (tensor<f32>, tensor<f32>) -> tensor<f32> loc("crates/radix/tests/compile.rs":73:23)
                "stablehlo.return"(%r3_0_0) : (tensor<f32>) -> ()
                }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32> loc("crates/radix/tests/compile.rs":73:23)
                "func.return"(%3) : (tensor<2xf32>) -> ()
              }
            }
        "#]],
    );
}

#[test]
fn linear_end_to_end() {
    let platform = platform();
    let model = Linear::new(3, 2);
    let x = Tensor::param(Shape::tagged(DType::F32, &[("b", 2), ("d", 3)]));
    let exe = radix::compile(&platform, &model, &x, |m, x| m.forward(x)).unwrap();
    let args: Vec<String> = exe
        .program()
        .args()
        .iter()
        .map(|a| format!("{}: {}", a.path, a.shape))
        .collect();
    expect!["weight: {dout=2, d=3, f32}, bias: {dout=2, f32}, input: {b=2, d=3, f32}"]
        .assert_eq(&args.join(", "));
    let w =
        Buffer::from_slice(&platform, &[1f32, 0., 1., 0., 1., 0.], model.weight.shape()).unwrap();
    let b = Buffer::from_slice(&platform, &[10f32, 20.], model.bias.unwrap().shape()).unwrap();
    // The model's twin with buffer leaves (`radix::Bufferized<Linear>`),
    // made by `#[derive(Module)]`; plain fields are kept.
    let weights = LinearWith {
        weight: w,
        bias: Some(b),
        _name: "test",
        n_out: 2,
    };
    let x = Buffer::from_slice(&platform, &[1f32, 2., 3., 4., 5., 6.], x.shape()).unwrap();
    let y = exe.call(&weights, x).unwrap();
    assert_eq!(y.shape(), Shape::tagged(DType::F32, &[("b", 2), ("d", 2)]));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![14., 22., 20., 25.]);
    assert_eq!(model.n_out, 2);
}

#[test]
fn printing_is_deterministic_and_skips_dead_ops() {
    let f = |x: Tensor| {
        let _dead = x.exp();
        x + x
    };
    let s = Shape::new(DType::F32, &[2]);
    let print = || {
        radix::trace_fn(&Tensor::param(s), f)
            .unwrap()
            .optimize()
            .stablehlo()
    };
    let (a, b) = (print(), print());
    assert_eq!(a, b);
    assert!(!a.contains("exponential"), "{a}");
}

/// `trace` leaves the passes to compiling: the traced program keeps `x + 0`,
/// `optimize` drops it (once), and the compiled executable holds the
/// optimized program.
#[test]
fn trace_leaves_the_passes_to_compile() {
    let s = Shape::new(DType::F32, &[2]);
    let traced = radix::trace_fn(&Tensor::param(s), |x| x.tanh() + 0.0).unwrap();
    assert!(!traced.is_optimized());
    let raw = traced.stablehlo_without_locations();
    assert!(raw.contains("stablehlo.add"), "{raw}");
    let optimized = traced.clone().optimize();
    assert!(optimized.is_optimized());
    let text = optimized.stablehlo_without_locations();
    assert!(text.contains("stablehlo.tanh"), "{text}");
    assert!(!text.contains("stablehlo.add"), "{text}");
    assert_eq!(
        optimized.clone().optimize().stablehlo_without_locations(),
        text
    );
    let exe = radix::compile_program(&platform(), traced).unwrap();
    assert_eq!(exe.program().stablehlo_without_locations(), text);
}

/// The tracer leaves nested functions as traced too: a `call` body and a
/// `while` body keep their `x + 0` until `optimize`, which reaches into them.
#[test]
fn trace_leaves_nested_functions_as_traced() {
    fn body(x: &Tensor) -> Tensor {
        x.tanh() + 0.0
    }
    let s = Shape::new(DType::F32, &[2]);
    let f = |x: Tensor| {
        let y = radix::call("body", body, &x);
        radix::while_(
            &[y],
            |s| s[0].max(0).lt(Tensor::scalar(10.0, DType::F32)),
            |s| vec![s[0] * 2.0 + 0.0],
        )[0]
    };
    let traced = radix::trace_fn(&Tensor::param(s), f).unwrap();
    let raw = traced.stablehlo_without_locations();
    assert_eq!(raw.matches("stablehlo.add").count(), 2, "{raw}");
    let text = traced.optimize().stablehlo_without_locations();
    assert!(!text.contains("stablehlo.add"), "{text}");
    assert!(text.contains("stablehlo.tanh"), "{text}");
    assert!(text.contains("stablehlo.multiply"), "{text}");
}

/// A forward that reads some of the model's tensors takes only those: the
/// program's arguments are the tensors read (in the model's order) and
/// the inputs, and a call still takes the whole model.
#[test]
fn a_program_takes_only_the_weights_it_reads() {
    let platform = platform();
    let model = Stack {
        layers: vec![Linear::new(3, 2), Linear::new(2, 2)],
        extra: [None, Some(Tensor::param(Shape::new(DType::I32, &[])))],
        pair: (Tensor::param(Shape::new(DType::F32, &[1])), 1.0),
    };
    let x = Tensor::param(Shape::tagged(DType::F32, &[("b", 1), ("d", 2)]));
    // Reads the second layer and `pair.0`; a value it computes from the
    // first layer's weight is dead.
    let forward = |m: &Stack, x: Tensor| {
        let _dead = m.layers[0].weight * 2.0;
        let y = m.layers[1].forward(x);
        y + m.pair.0.reshape(&[]).broadcast(y.shape())
    };
    let exe = radix::compile(&platform, &model, &x, forward).unwrap();
    let args: Vec<&str> = exe
        .program()
        .args()
        .iter()
        .map(|a| a.path.as_str())
        .collect();
    assert_eq!(
        args,
        ["layers.1.weight", "layers.1.bias", "pair.0", "input"]
    );
    assert_eq!(exe.program().n_weights(), 3);
    let buf = |v: &[f32], t: Tensor| Buffer::from_slice(&platform, v, t.shape()).unwrap();
    let layer = |w: &[f32], l: &Linear| LinearWith {
        weight: buf(w, l.weight),
        bias: Some(buf(&[10., 20.], l.bias.unwrap())),
        _name: "",
        n_out: 2,
    };
    let seven = Buffer::from_slice(&platform, &[7i32], Shape::new(DType::I32, &[])).unwrap();
    let weights = StackWith {
        layers: vec![
            layer(&[0.; 6], &model.layers[0]),
            layer(&[1., 0., 0., 2.], &model.layers[1]),
        ],
        extra: [None, Some(seven)],
        pair: (buf(&[0.5], model.pair.0), 1.0),
    };
    let y = exe.call(&weights, buf(&[3., 4.], x)).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), [13.5, 28.5]);
    // The whole model is still what a call checks against.
    let short = StackWith {
        layers: vec![],
        ..weights
    };
    assert!(matches!(
        exe.call(&short, buf(&[3., 4.], x)),
        Err(radix::Error::ArgumentCount {
            what: "weights",
            expected: 6,
            got: 2,
        })
    ));
}
