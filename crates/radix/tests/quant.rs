//! The quantized ops against f32 arithmetic on the reference decoding, for
//! every block format: `quant::dot` (one token: the matvec kernel; several,
//! the contracted axis first: the matmul kernel) and `quant::rows` (ids out
//! of range clamp), each through the interpreter, on the CPU plugin's
//! kernels and on the CPU plugin with the in-graph fallback.

mod blocks;

use blocks::{KINDS, Rng, block, reference};
use radix::quant::{Format, Products, blocks_shape, blocks_shape_with, panels_shape, split_shape};
use radix::testing::{Tol, assert_all_close, run_program_with, trace_fn};
use radix::{CustomCallMode, DType, Literal, Program, Shape};

/// `program` on `inputs` compiled with custom calls run as `mode`.
fn run(program: Program, inputs: &[Literal], mode: CustomCallMode) -> Vec<Vec<f32>> {
    run_program_with(program, inputs, mode)
        .expect("compile and run")
        .iter()
        .map(|l| l.to_vec::<f32>())
        .collect()
}

/// An f32 literal with tagged axes.
fn f32_literal(values: &[f32], axes: &[(&str, i64)]) -> Literal {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Literal::from_bytes(Shape::tagged(DType::F32, axes), &bytes)
}

/// A `rows × cols` matrix of `format` blocks, every kind of block in turn
/// (float formats: values in [-1, 1), so that sums stay finite).
fn matrix(format: Format, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let n = rows * cols;
    match format {
        Format::F32 => return (0..n).flat_map(|_| rng.unit().to_le_bytes()).collect(),
        Format::F16 => {
            return (0..n)
                .flat_map(|_| half::f16::from_f32(rng.unit()).to_le_bytes())
                .collect();
        }
        Format::BF16 => {
            return (0..n)
                .flat_map(|_| half::bf16::from_f32(rng.unit()).to_le_bytes())
                .collect();
        }
        _ => {}
    }
    let per_row = cols / format.block_len();
    (0..rows * per_row)
        .flat_map(|k| block(format, KINDS[k % KINDS.len()], rng))
        .collect()
}

/// `y[t, r] = Σ_c w[r, c] x[t, c]` in f64, and the largest `|w x|` term.
fn reference_dot(w: &[f32], x: &[f32], cols: usize) -> (Vec<f32>, f64) {
    let mut scale = 0f64;
    let y = x
        .chunks_exact(cols)
        .flat_map(|x| {
            w.chunks_exact(cols)
                .map(|w| {
                    w.iter()
                        .zip(x)
                        .map(|(&w, &x)| {
                            let term = f64::from(w) * f64::from(x);
                            scale = scale.max(term.abs());
                            term
                        })
                        .sum::<f64>() as f32
                })
                .collect::<Vec<_>>()
        })
        .collect();
    (y, scale)
}

/// `x` as the 8-bit activations the integer kernels multiply: each token
/// quantized to Q8_0 blocks and decoded again.
fn quantized_activations(x: &[f32], cols: usize) -> Vec<f32> {
    x.chunks_exact(cols)
        .flat_map(|x| {
            let mut q = vec![0u8; Format::Q8_0.row_bytes(cols).expect("whole blocks")];
            radix_quant::quantize_q8_0(x, &mut q).expect("lengths");
            let mut x = vec![0f32; cols];
            radix_quant::dequantize(Format::Q8_0, &q, &mut x).expect("blocks");
            x
        })
        .collect()
}

/// The formats with integer kernels: their [`Products::Int8`] products
/// multiply quantized activations.
const INT8_FORMATS: [Format; 8] = [
    Format::Q8_0,
    Format::Q4_0,
    Format::Q4_1,
    Format::Q5_0,
    Format::Q5_1,
    Format::Q4_K,
    Format::Q5_K,
    Format::Q6_K,
];

/// One token `[d]` and three tokens stored `[d, s]` (the contracted axis
/// first) times a 5-row matrix, every way the ops run. The kernels compute
/// `W·x` for [`Products::Exact`], and for [`Products::Int8`] `W·x̃` with the
/// activations `x̃` quantized to 8 bits where the format has an integer
/// kernel; the interpreter runs the kernels; the in-graph fallback is `W·x`.
fn check_dot(format: Format, products: Products, rng: &mut Rng) {
    let (rows, cols) = (5, 2 * format.block_len().max(32));
    let w = matrix(format, rows, cols, rng);
    let x: Vec<f32> = (0..3 * cols).map(|_| rng.unit()).collect();
    // `[d, s]`: token `t` is column `t`.
    let x_ds: Vec<f32> = (0..cols)
        .flat_map(|c| (0..3).map(|t| x[t * cols + c]).collect::<Vec<_>>())
        .collect();
    let w_shape =
        blocks_shape_with(format, ("out", rows as i64), cols as i64, products).expect("blocks");
    let inputs = [
        Literal::from_bytes(w_shape, &w),
        f32_literal(&x[..cols], &[("d", cols as i64)]),
        f32_literal(&x_ds, &[("d", cols as i64), ("s", 3)]),
    ];
    let program = trace_fn(&inputs, |t| {
        (
            radix::quant::dot(t[1], t[0], "d"),
            radix::quant::dot(t[2], t[0], "d"),
        )
    })
    .unwrap_or_else(|e| panic!("{format:?}: {e}"));
    let shapes: Vec<String> = program
        .results()
        .iter()
        .map(|r| r.shape.to_string())
        .collect();
    assert_eq!(shapes, ["{out=5, f32}", "{s=3, out=5, f32}"], "{format:?}");

    let decoded = reference(format, &w);
    let int8 = products == Products::Int8 && INT8_FORMATS.contains(&format);
    let x_kernel = if int8 {
        quantized_activations(&x, cols)
    } else {
        x.clone()
    };
    let check = |what: &str, got: &[Vec<f32>], x: &[f32]| {
        let (want, scale) = reference_dot(&decoded, x, cols);
        let tol = Tol::sum(DType::F32, cols, scale);
        let what = format!("{format:?} {products:?} {what}");
        assert_all_close(&format!("{what}, one token"), &got[0], &want[..rows], tol);
        assert_all_close(&format!("{what}, three tokens"), &got[1], &want, tol);
    };
    let interp: Vec<Vec<f32>> = program
        .interpret(&inputs)
        .iter()
        .map(|l| l.to_vec::<f32>())
        .collect();
    check("interpreter", &interp, &x_kernel);
    let native = run(program.clone(), &inputs, CustomCallMode::Native);
    check("kernels", &native, &x_kernel);
    if int8 {
        // A token's products do not depend on the other tokens of the step.
        assert_eq!(
            native[0],
            native[1][..rows],
            "{format:?}: token 0 alone and of three"
        );
    }
    let fallback = run(program, &inputs, CustomCallMode::Fallback);
    check("fallback", &fallback, &x);
}

#[test]
fn dot_equals_f32_arithmetic_on_the_decoded_weights() {
    let mut rng = Rng(0x5851_F42D_4C95_7F2D);
    for format in Format::ALL {
        for products in [Products::Exact, Products::Int8] {
            check_dot(format, products, &mut rng);
        }
    }
}

/// An F32 matrix packed in panels (two of 16 rows) times one token and
/// three: `W·x` through the interpreter, the kernels and the in-graph
/// fallback (which puts the rows back in order), the same as the row-major
/// matrix gives; an embedding lookup refuses it.
#[test]
fn dot_of_panels_equals_the_row_major_products() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let (rows, cols) = (32, 24);
    let w = matrix(Format::F32, rows, cols, &mut rng);
    let panels = radix_quant::pack_panels(rows, cols, &w).expect("whole panels");
    let x: Vec<f32> = (0..3 * cols).map(|_| rng.unit()).collect();
    let x_ds: Vec<f32> = (0..cols)
        .flat_map(|c| (0..3).map(|t| x[t * cols + c]).collect::<Vec<_>>())
        .collect();
    let shape = panels_shape(("out", rows as i64), cols as i64).expect("whole panels");
    let inputs = [
        Literal::from_bytes(shape, &panels),
        f32_literal(&x[..cols], &[("d", cols as i64)]),
        f32_literal(&x_ds, &[("d", cols as i64), ("s", 3)]),
    ];
    let program = trace_fn(&inputs, |t| {
        (
            radix::quant::dot(t[1], t[0], "d"),
            radix::quant::dot(t[2], t[0], "d"),
        )
    })
    .expect("trace");
    let decoded = reference(Format::F32, &w);
    let (want, scale) = reference_dot(&decoded, &x, cols);
    let tol = Tol::sum(DType::F32, cols, scale);
    let interp: Vec<Vec<f32>> = program
        .interpret(&inputs)
        .iter()
        .map(|l| l.to_vec::<f32>())
        .collect();
    let native = run(program.clone(), &inputs, CustomCallMode::Native);
    let fallback = run(program, &inputs, CustomCallMode::Fallback);
    for (what, got) in [
        ("interpreter", interp),
        ("kernels", native),
        ("fallback", fallback),
    ] {
        assert_all_close(
            &format!("panels {what}, one token"),
            &got[0],
            &want[..rows],
            tol,
        );
        assert_all_close(&format!("panels {what}, three tokens"), &got[1], &want, tol);
    }
    let ids = Literal::from_bytes(Shape::new(DType::I32, &[1]), &0i32.to_le_bytes());
    let err = trace_fn(&[inputs[0].clone(), ids], |t| {
        radix::quant::rows(t[0], t[1], "d")
    })
    .expect_err("panels are no table");
    assert!(err.to_string().contains("rows in order"), "{err}");
}

/// `dot_bias` is `dot` plus the bias on every token, and
/// `dot_bias_gelu_erf` is `nn::gelu_erf` of it bit for bit (the same ops
/// in the same order), through the interpreter, the kernels (row-major
/// blocks and F32 panels) and the in-graph fallback; a bias of the wrong
/// size is a trace error.
#[test]
fn dot_bias_adds_the_bias_to_every_token() {
    let mut rng = Rng(0x1405_7B7E_F767_814F);
    let (rows, cols) = (16, 64);
    let x: Vec<f32> = (0..3 * cols).map(|_| rng.unit()).collect();
    let bias: Vec<f32> = (0..rows).map(|_| rng.unit()).collect();
    let f32_rows = matrix(Format::F32, rows, cols, &mut rng);
    let weights = [
        (
            blocks_shape(Format::Q4_0, ("out", rows as i64), cols as i64).expect("blocks"),
            matrix(Format::Q4_0, rows, cols, &mut rng),
        ),
        (
            panels_shape(("out", rows as i64), cols as i64).expect("panels"),
            radix_quant::pack_panels(rows, cols, &f32_rows).expect("panels"),
        ),
    ];
    for (shape, bytes) in weights {
        let inputs = [
            Literal::from_bytes(shape, &bytes),
            f32_literal(&x, &[("s", 3), ("d", cols as i64)]),
            f32_literal(&bias, &[("out", rows as i64)]),
        ];
        let program = trace_fn(&inputs, |t| {
            let plain = radix::quant::dot(t[1], t[0], "d");
            let biased = radix::quant::dot_bias(t[1], t[0], t[2], "d");
            let gelu = radix::quant::dot_bias_gelu_erf(t[1], t[0], t[2], "d");
            (plain, biased, gelu, radix::nn::gelu_erf(biased))
        })
        .expect("trace");
        let interp: Vec<Vec<f32>> = program
            .interpret(&inputs)
            .iter()
            .map(|l| l.to_vec::<f32>())
            .collect();
        let native = run(program.clone(), &inputs, CustomCallMode::Native);
        let fallback = run(program, &inputs, CustomCallMode::Fallback);
        for (what, got) in [
            ("interpreter", interp),
            ("kernels", native),
            ("fallback", fallback),
        ] {
            // The same products, then one f32 add each.
            let want: Vec<f32> = got[0]
                .iter()
                .enumerate()
                .map(|(i, y)| y + bias[i % rows])
                .collect();
            assert_eq!(got[1], want, "{shape} {what}");
            assert_eq!(got[2], got[3], "{shape} {what}: the GELU in the call");
            assert_ne!(got[2], got[1], "{shape} {what}: no GELU");
        }
    }
    let w = blocks_shape(Format::Q4_0, ("out", 4), 32).expect("blocks");
    let inputs = [
        Literal::from_bytes(w, &vec![0; w.byte_size()]),
        f32_literal(&[0.0; 32], &[("d", 32)]),
        f32_literal(&[0.0; 3], &[("out", 3)]),
    ];
    let err = trace_fn(&inputs, |t| radix::quant::dot_bias(t[1], t[0], t[2], "d"))
        .expect_err("3 values for 4 rows");
    assert!(err.to_string().contains("bias"), "{err}");
}

/// Rows of a 7-row table by ids `[2, 3]`, including -1 and 9 (clamped).
fn check_rows(format: Format, rng: &mut Rng) {
    let (n_rows, cols) = (7, 2 * format.block_len().max(32));
    let table = matrix(format, n_rows, cols, rng);
    let ids = [3i32, -1, 6, 9, 0, 3];
    let shape = blocks_shape(format, ("voc", n_rows as i64), cols as i64).expect("blocks");
    let inputs = [
        Literal::from_bytes(shape, &table),
        Literal::from_slice(&ids, &[2, 3]),
    ];
    let program = trace_fn(&inputs, |t| radix::quant::rows(t[0], t[1], "d"))
        .unwrap_or_else(|e| panic!("{format:?}: {e}"));
    assert_eq!(
        program.results()[0].shape.to_string(),
        format!("{{2, 3, d={cols}, f32}}")
    );
    let decoded = reference(format, &table);
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&i| {
            let r = i.clamp(0, n_rows as i32 - 1) as usize;
            decoded[r * cols..(r + 1) * cols].to_vec()
        })
        .collect();
    // Both decoders do the same f32 arithmetic: equal bit for bit.
    let exact = Tol { rel: 0.0, abs: 0.0 };
    let interp = program.interpret(&inputs)[0].to_vec::<f32>();
    assert_all_close(&format!("{format:?} interpreter"), &interp, &want, exact);
    for mode in [CustomCallMode::Native, CustomCallMode::Fallback] {
        let got = run(program.clone(), &inputs, mode);
        assert_all_close(&format!("{format:?} {mode:?}"), &got[0], &want, exact);
    }
}

#[test]
fn rows_equal_the_decoded_table_at_clamped_ids() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for format in Format::ALL {
        check_rows(format, &mut rng);
    }
}

#[test]
fn misuse_is_a_trace_error_at_the_callers_line() {
    let w = blocks_shape(Format::Q4_0, ("out", 4), 64).expect("blocks");
    let inputs = [
        Literal::from_bytes(w, &vec![0; w.byte_size()]),
        f32_literal(&[0.0; 32], &[("d", 32)]),
    ];
    let line = line!() + 1;
    let err = trace_fn(&inputs, |t| radix::quant::dot(t[1], t[0], "d")).expect_err("32 ≠ 64");
    let e = err.as_trace().expect("a trace error");
    assert_eq!((e.op, e.file, e.line), ("quant_dot", file!(), line));
    let err = trace_fn(&inputs, |t| radix::quant::rows(t[1], t[0], "d")).expect_err("no table");
    assert!(err.to_string().contains("blocks table"), "{err}");
    // Tags that say two things at once, or split rows of a format that has
    // none, are no blocks shapes.
    for tag in [
        "blocks:Q8_0:split:exact",
        "blocks:F32:panels:exact",
        "blocks:Q5_1:split",
        "blocks:Q8_0:panels",
    ] {
        let s = Shape::tagged(DType::U8, &[("out", 4), (tag, 68)]);
        assert_eq!(radix::quant::blocks_format(&s), None, "{tag}");
    }
}

/// The gradient through `quant::dot` (plain, with a bias, with the bias and
/// GELU) with respect to the activations and the bias equals the gradient
/// through an f32 dot of the decoded weights, on the kernels and on the
/// fallback: what LoRA adapters below a quantized layer train through.
#[test]
fn dot_differentiates_with_respect_to_activations_and_bias() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (rows, cols, n) = (16, 64, 3);
    let w = blocks_shape(Format::Q4_0, ("out", rows as i64), cols as i64).expect("blocks");
    let inputs = [
        Literal::from_bytes(w, &matrix(Format::Q4_0, rows, cols, &mut rng)),
        f32_literal(
            &(0..n * cols).map(|_| rng.unit()).collect::<Vec<_>>(),
            &[("s", n as i64), ("d", cols as i64)],
        ),
        f32_literal(
            &(0..rows).map(|_| rng.unit()).collect::<Vec<_>>(),
            &[("out", rows as i64)],
        ),
        f32_literal(
            &(0..n * rows).map(|_| rng.unit()).collect::<Vec<_>>(),
            &[("s", n as i64), ("out", rows as i64)],
        ),
    ];
    type Dot = fn(radix::Tensor, radix::Tensor, radix::Tensor) -> radix::Tensor;
    let quant: [Dot; 3] = [
        |x, w, _| radix::quant::dot(x, w, "d"),
        |x, w, b| radix::quant::dot_bias(x, w, b, "d"),
        |x, w, b| radix::quant::dot_bias_gelu_erf(x, w, b, "d"),
    ];
    let plain: [Dot; 3] = [
        |x, w, _| x.dot(radix::quant::dequantize(w, "d"), "d"),
        |x, w, b| {
            let y = x.dot(radix::quant::dequantize(w, "d"), "d");
            y + b.broadcast(y.shape())
        },
        |x, w, b| {
            let y = x.dot(radix::quant::dequantize(w, "d"), "d");
            radix::nn::gelu_erf(y + b.broadcast(y.shape()))
        },
    ];
    for (k, (q, p)) in quant.into_iter().zip(plain).enumerate() {
        let program = trace_fn(&inputs, |t| {
            let grads = |dot: Dot| {
                let loss = |xb: &(radix::Tensor, radix::Tensor), w: &radix::Tensor| {
                    (dot(xb.0, *w, xb.1) * t[3]).sum(["s", "out"])
                };
                radix::grad(loss, &(t[1], t[2]), &t[0])
            };
            (grads(q), grads(p))
        })
        .expect("trace");
        for mode in [CustomCallMode::Native, CustomCallMode::Fallback] {
            let got = run(program.clone(), &inputs, mode);
            let tol = Tol::sum(DType::F32, cols, 4.0);
            assert_all_close(&format!("dot {k} dx {mode:?}"), &got[0], &got[2], tol);
            assert_all_close(&format!("dot {k} dbias {mode:?}"), &got[1], &got[3], tol);
            assert!(got[0].iter().any(|&v| v != 0.0), "dot {k}: a zero gradient");
        }
    }
}

/// `quant::dots`, one call for matrices sharing their input, gives each
/// matrix the bits of its own `quant::dot` on the kernels (one token and
/// three), the same values with the in-graph fallback, and the same
/// gradient with respect to the input.
#[test]
fn dots_give_each_matrix_its_own_dot() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let cols = 256;
    let formats = [(Format::Q4_1, 5), (Format::Q8_0, 3), (Format::Q4_K, 2)];
    let mut inputs: Vec<Literal> = formats
        .iter()
        .map(|&(f, rows)| {
            let shape = blocks_shape(f, ("out", rows), cols as i64).expect("blocks");
            Literal::from_bytes(shape, &matrix(f, rows as usize, cols, &mut rng))
        })
        .collect();
    let x: Vec<f32> = (0..3 * cols).map(|_| rng.unit()).collect();
    inputs.push(f32_literal(&x[..cols], &[("d", cols as i64)]));
    inputs.push(f32_literal(&x, &[("s", 3), ("d", cols as i64)]));
    let program = trace_fn(&inputs, |t| {
        let ws = &t[..3];
        let mut outs = vec![];
        for x in [t[3], t[4]] {
            outs.extend(radix::quant::dots(x, ws, "d"));
            outs.extend(ws.iter().map(|&w| radix::quant::dot(x, w, "d")));
        }
        outs
    })
    .expect("trace");
    let text = program.stablehlo();
    let calls = text.lines().filter(|l| l.contains("radix.quant_dots"));
    assert_eq!(calls.count(), 2, "one call per input:\n{text}");
    for mode in [CustomCallMode::Native, CustomCallMode::Fallback] {
        let got = run(program.clone(), &inputs, mode);
        for (k, pair) in got.chunks_exact(6).enumerate() {
            for i in 0..3 {
                let what = format!("{mode:?}, input {k}, matrix {i}");
                match mode {
                    CustomCallMode::Native => assert_eq!(pair[i], pair[3 + i], "{what}"),
                    _ => assert_all_close(
                        &what,
                        &pair[i],
                        &pair[3 + i],
                        Tol::sum(DType::F32, cols, 1.0),
                    ),
                }
            }
        }
    }
    // d/dx of Σᵢ Σ yᵢ·cᵢ through one call and through a call per matrix.
    let program = trace_fn(&inputs, |t| {
        let ws = [t[0], t[1], t[2]];
        let loss = |fused: bool| {
            move |x: &radix::Tensor, ws: &[radix::Tensor; 3]| {
                let ys = if fused {
                    radix::quant::dots(*x, ws, "d")
                } else {
                    ws.iter().map(|&w| radix::quant::dot(*x, w, "d")).collect()
                };
                let weighted = ys
                    .iter()
                    .enumerate()
                    .map(|(i, &y)| (y * (i as f64 + 1.0)).sum(["s", "out"]));
                weighted.reduce(|a, b| a + b).expect("three matrices")
            }
        };
        (
            radix::grad(loss(true), &t[4], &ws),
            radix::grad(loss(false), &t[4], &ws),
        )
    })
    .expect("trace");
    for mode in [CustomCallMode::Native, CustomCallMode::Fallback] {
        let got = run(program.clone(), &inputs, mode);
        let tol = Tol::sum(DType::F32, 10, 8.0);
        assert_all_close(&format!("dx {mode:?}"), &got[0], &got[1], tol);
        assert!(got[0].iter().any(|&v| v != 0.0), "a zero gradient");
    }
}

/// Q8_0, Q4_0, Q4_1 and Q5_0 rows split at load (`Layout::Split`) give the bits their blocks
/// give, in every op that reads them: `dot` of one token, of a batch and
/// of a prompt (tiles), `dots` beside a matrix of blocks, `rows` and
/// `dequantize`, on the kernels, in the fallback and in the interpreter.
#[test]
fn split_rows_give_the_bits_of_their_blocks() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for format in [Format::Q8_0, Format::Q4_0, Format::Q4_1, Format::Q5_0] {
        check_split(format, &mut rng);
    }
}

/// [`split_rows_give_the_bits_of_their_blocks`] for `format`.
fn check_split(format: Format, rng: &mut Rng) {
    let (rows, cols) = (9, 96);
    let w = matrix(format, rows, cols, rng);
    let mut split = vec![0u8; w.len()];
    radix_quant::split_rows(format, cols, &w, &mut split).expect("whole rows");
    let axes = |t: usize| [("s", t as i64), ("d", cols as i64)];
    let x = |t: usize, rng: &mut Rng| {
        let x: Vec<f32> = (0..t * cols).map(|_| rng.unit()).collect();
        f32_literal(&x, &axes(t))
    };
    let (x1, x3, x20) = (x(1, rng), x(3, rng), x(20, rng));
    let ids = Literal::from_slice(&[3i32, -1, 8, 0], &[4]);
    let rows_axis = ("out", rows as i64);
    let blocks = blocks_shape(format, rows_axis, cols as i64).expect("blocks");
    let split_shape = split_shape(format, rows_axis, cols as i64).expect("split");
    let inputs = |shape: Shape, bytes: &[u8]| {
        vec![
            Literal::from_bytes(shape, bytes),
            x1.clone(),
            x3.clone(),
            x20.clone(),
            ids.clone(),
            Literal::from_bytes(blocks, &w),
        ]
    };
    let (of_blocks, of_split) = (inputs(blocks, &w), inputs(split_shape, &split));
    let program = |inputs: &[Literal]| {
        trace_fn(inputs, |t| {
            let two = radix::quant::dots(t[2], &[t[0], t[5]], "d");
            vec![
                radix::quant::dot(t[1], t[0], "d"),
                radix::quant::dot(t[2], t[0], "d"),
                radix::quant::dot(t[3], t[0], "d"),
                two[0],
                two[1],
                radix::quant::rows(t[0], t[4], "d"),
                radix::quant::dequantize(t[0], "d"),
            ]
        })
        .expect("trace")
    };
    let bits = |r: Vec<Vec<f32>>| -> Vec<Vec<u32>> {
        r.iter()
            .map(|v| v.iter().map(|x| x.to_bits()).collect())
            .collect()
    };
    for mode in [CustomCallMode::Native, CustomCallMode::Fallback] {
        let want = run(program(&of_blocks), &of_blocks, mode);
        let got = run(program(&of_split), &of_split, mode);
        assert_eq!(bits(got), bits(want), "{format:?} {mode:?}");
    }
    let interp = |inputs: &[Literal]| -> Vec<Vec<f32>> {
        let p = program(inputs);
        p.interpret(inputs)
            .iter()
            .map(|l| l.to_vec::<f32>())
            .collect()
    };
    assert_eq!(
        bits(interp(&of_split)),
        bits(interp(&of_blocks)),
        "interpreter"
    );
}
