//! A custom call's operand that is one layer of a stack
//! ([`Tensor::layer`](radix::Tensor::layer)) is read where it lies where
//! the kernels run: the compiled program gives the call the stack and the
//! index (`radix.layers`), takes no slice of the stack, and gives the
//! bits of the call on that layer alone, in a loop over the layers too;
//! the interpreter of the compiled program and the fallbacks agree, and an
//! index out of range clamps as `dynamic_slice` clamps it.

mod blocks;

use blocks::{Kind, Rng, block};
use radix::quant::{Format, blocks_shape};
use radix::testing::{Tol, assert_all_close, platform, run_program_with, trace_fn};
use radix::{CustomCallMode, DType, Literal, Program, Shape, Tensor};

const LAYERS: usize = 3;
const ROWS: usize = 8;
const COLS: usize = 64;

/// `program` on `inputs` with custom calls run as `mode`, as f32s.
fn run(program: Program, inputs: &[Literal], mode: CustomCallMode) -> Vec<Vec<f32>> {
    (run_program_with(program, inputs, mode)
        .expect("compile and run")
        .iter())
    .map(|l| l.to_vec::<f32>())
    .collect()
}

/// `LAYERS` Q4_1 matrices of `ROWS × COLS`, stacked, the shape of one
/// and the stack's.
fn stack(rng: &mut Rng) -> (Vec<u8>, Shape, Shape) {
    let one = blocks_shape(Format::Q4_1, ("out", ROWS as i64), COLS as i64).expect("blocks");
    let stacked = one.insert_axis(0, LAYERS as i64, "layer").expect("rank");
    let per_layer = ROWS * COLS / Format::Q4_1.block_len();
    let bytes = (0..LAYERS * per_layer)
        .flat_map(|_| block(Format::Q4_1, Kind::Random, rng))
        .collect();
    (bytes, one, stacked)
}

/// Layer `i` of `stack`'s bytes.
fn layer_bytes(stack: &[u8], i: usize) -> &[u8] {
    let n = stack.len() / LAYERS;
    &stack[i * n..(i + 1) * n]
}

fn x_literal(rng: &mut Rng) -> Literal {
    let x: Vec<u8> = (0..COLS).flat_map(|_| rng.unit().to_le_bytes()).collect();
    Literal::from_bytes(Shape::tagged(DType::F32, &[("d", COLS as i64)]), &x)
}

/// The kernel's products of `x` and one matrix `w` alone.
fn alone(w: &[u8], one: Shape, x: &Literal) -> Vec<f32> {
    let inputs = [Literal::from_bytes(one, w), x.clone()];
    let program = trace_fn(&inputs, |t| radix::quant::dot(t[1], t[0], "d")).expect("trace");
    run(program, &inputs, CustomCallMode::Native).remove(0)
}

#[test]
fn a_kernel_reads_one_layer_of_a_stack_in_place() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (w, one, stacked) = stack(&mut rng);
    let x = x_literal(&mut rng);
    // In range, and clamped from above and below.
    for (index, read) in [(0, 0), (2, 2), (1, 1), (7, 2), (-4, 0)] {
        let inputs = [
            Literal::from_bytes(stacked, &w),
            x.clone(),
            Literal::from_slice(&[index], &[]),
        ];
        let program =
            trace_fn(&inputs, |t| radix::quant::dot(t[1], t[0].layer(t[2]), "d")).expect("trace");
        let compiled = radix::compile_program(&platform(), program.clone()).expect("compile");
        let text = compiled.program().stablehlo();
        assert!(text.contains("radix.layers"), "{text}");
        assert!(!text.contains("dynamic_slice"), "{text}");

        let want = alone(layer_bytes(&w, read), one, &x);
        let native = run(program.clone(), &inputs, CustomCallMode::Native);
        assert_eq!(native[0], want, "index {index}: the kernel on the stack");
        let interp = compiled.program().interpret(&inputs)[0].to_vec::<f32>();
        assert_eq!(
            interp, want,
            "index {index}: the interpreter of the compiled program"
        );
        // The fallback decodes the layer's blocks in the graph and sums
        // them in f32 (the kernel sums 8-bit activations' products):
        // within the activations' quantization and the sums' roundoff.
        let fallback = run(program, &inputs, CustomCallMode::Fallback);
        let scale = want.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
        let tol = Tol {
            rel: 1.0 / 64.0,
            abs: scale / 64.0,
        };
        assert_all_close(
            &format!("index {index}: fallback"),
            &fallback[0],
            &want,
            tol,
        );
    }
}

#[test]
fn an_index_the_handler_does_not_read_keeps_its_slice() {
    let mut rng = Rng(0x94D0_49BB_1331_11EB);
    let (w, one, stacked) = stack(&mut rng);
    let x = x_literal(&mut rng);
    // The handler reads i32 and i64 indices; a u32 one stays a slice.
    let inputs = [
        Literal::from_bytes(stacked, &w),
        x.clone(),
        Literal::from_slice(&[2u32], &[]),
    ];
    let program =
        trace_fn(&inputs, |t| radix::quant::dot(t[1], t[0].layer(t[2]), "d")).expect("trace");
    let compiled = radix::compile_program(&platform(), program.clone()).expect("compile");
    let text = compiled.program().stablehlo();
    assert!(!text.contains("radix.layers"), "{text}");
    assert!(text.contains("dynamic_slice"), "{text}");
    let native = run(program, &inputs, CustomCallMode::Native);
    assert_eq!(native[0], alone(layer_bytes(&w, 2), one, &x));
}

#[test]
fn a_loop_over_stacked_layers_reads_each_in_place() {
    let mut rng = Rng(0xBF58_476D_1CE4_E5B9);
    let (w, one, stacked) = stack(&mut rng);
    let x = x_literal(&mut rng);
    let inputs = [Literal::from_bytes(stacked, &w), x.clone()];
    let program = trace_fn(&inputs, |t| {
        let (w, x) = (t[0], t[1]);
        let (_, ys) = radix::for_(LAYERS as i64, "layer", &[], |i: Tensor, _| {
            (vec![], vec![radix::quant::dot(x, w.layer(i), "d")])
        });
        ys[0]
    })
    .expect("trace");
    let compiled = radix::compile_program(&platform(), program.clone()).expect("compile");
    let text = compiled.program().stablehlo();
    assert!(text.contains("radix.layers"), "{text}");
    assert!(!text.contains("dynamic_slice"), "{text}");
    let native = run(program, &inputs, CustomCallMode::Native).remove(0);
    let want: Vec<f32> = (0..LAYERS)
        .flat_map(|i| alone(layer_bytes(&w, i), one, &x))
        .collect();
    assert_eq!(native, want, "each layer's products, stacked");
}

/// f32 values `0, 1, 2, ...` of a shape tagged `axes`.
fn counting(axes: &[(&str, i64)], from: f32) -> Literal {
    let shape = Shape::tagged(DType::F32, axes);
    let values: Vec<f32> = (0..shape.count()).map(|i| from + i as f32).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Literal::from_bytes(shape, &bytes)
}

#[test]
fn a_stacked_cache_takes_a_layers_keys_where_they_go() {
    use radix::nn::KvCache;
    let (layers, positions, heads, width, new) = (3, 8, 2, 4, 3);
    let stack = [
        ("layer", layers),
        ("b", 1),
        ("k", positions),
        ("h", heads),
        ("hd", width),
    ];
    let tokens = [("b", 1), ("k", new), ("h", heads), ("hd", width)];
    for (layer, start) in [(1, 2), (0, 0), (2, 5)] {
        let inputs = [
            counting(&stack, 0.0),
            counting(&stack, 1000.0),
            counting(&tokens, -100.0),
            counting(&tokens, -200.0),
            Literal::from_slice(&[layer as i32], &[]),
            Literal::from_slice(&[start as i32], &[]),
        ];
        let got = radix::testing::run(&inputs, |t| {
            let cache = KvCache { k: t[0], v: t[1] };
            let c = cache.write_layer(t[4], t[5], t[2], t[3]);
            (c.k, c.v)
        })
        .expect("run");
        for (j, (old, tokens)) in [(&inputs[0], &inputs[2]), (&inputs[1], &inputs[3])]
            .into_iter()
            .enumerate()
        {
            let mut want = old.to_vec::<f32>();
            let row = (heads * width) as usize;
            for p in 0..new as usize {
                let at = (layer * positions as usize + start + p) * row;
                want[at..at + row].copy_from_slice(&tokens.to_vec::<f32>()[p * row..(p + 1) * row]);
            }
            assert_eq!(
                got[j].to_vec::<f32>(),
                want,
                "layer {layer}, start {start}, result {j}"
            );
        }
    }
    // A cache of one layer has no layer to pick.
    let one = counting(&stack[1..], 0.0);
    let err = trace_fn(&[one.clone(), one, counting(&tokens, 0.0)], |t| {
        let c = KvCache { k: t[0], v: t[1] };
        let zero = Tensor::scalar(0.0, DType::I32);
        c.write_layer(zero, zero, t[2], t[2]).k
    })
    .expect_err("no layer axis");
    assert!(err.to_string().contains("write_layer"), "{err}");
}
