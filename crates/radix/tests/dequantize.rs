//! `quant::dequantize`, the in-graph decoder, against the scalar reference
//! `radix_quant::dequantize`, bit for bit: through the reference interpreter
//! and compiled on the CPU plugin, for every format, on random blocks and on
//! extreme ones (every code bit set or clear, zero, huge and subnormal
//! scales), with leading axes and after a gather of rows by ids.

mod blocks;

use blocks::{KINDS, Rng, block, reference};
use radix::quant::{Format, blocks_shape, dequantize};
use radix::testing::{run_program, trace_fn};
use radix::{DType, Literal, Shape, Tensor};

/// `got` holds the f32s `want`, bit for bit (`-0.0` is not `+0.0`).
#[track_caller]
fn assert_bits(format: Format, what: &str, got: &Literal, want: &[f32]) {
    let got = got.to_vec::<f32>();
    assert_eq!(got.len(), want.len(), "{format:?} {what}");
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{format:?} {what}: element {j} is {g:e} ({:#010x}), the reference says {w:e} ({:#010x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}

/// Decodes, for `format`, blocks `[kind=5, row=2, row_bytes]` (each kind's
/// two rows of two blocks) and rows of a `[voc=7, row_bytes]` table
/// gathered by ids `[2, 2]`, in one program: through the interpreter and on
/// the CPU plugin, each against the reference.
fn check(format: Format, rng: &mut Rng) {
    let cols = if format.block_len() == 1 {
        64
    } else {
        2 * format.block_len()
    };
    let per_row = cols / format.block_len();
    let row_bytes = cols / format.block_len() * format.block_bytes();
    let x: Vec<u8> = KINDS
        .iter()
        .flat_map(|&kind| {
            (0..2 * per_row)
                .flat_map(|_| block(format, kind, rng))
                .collect::<Vec<_>>()
        })
        .collect();
    let x_shape = blocks_shape(format, ("row", 2), cols as i64)
        .and_then(|s| s.insert_axis(0, 5, "kind").ok_or_else(String::new))
        .expect("a blocks shape");
    let table: Vec<u8> = (0..7 * per_row)
        .flat_map(|k| block(format, KINDS[k % KINDS.len()], rng))
        .collect();
    let table_shape = blocks_shape(format, ("voc", 7), cols as i64).expect("a blocks shape");
    let ids = [3i32, 0, 6, 3];
    let inputs = [
        Literal::from_bytes(x_shape, &x),
        Literal::from_bytes(table_shape, &table),
        Literal::from_slice(&ids, &[2, 2]),
    ];
    let program = trace_fn(&inputs, |t| {
        let rows = t[1].gather("voc", t[2]);
        (dequantize(t[0], "col"), dequantize(rows, "col"))
    })
    .unwrap_or_else(|e| panic!("{format:?}: {e}"));
    let shapes: Vec<String> = program
        .results()
        .iter()
        .map(|r| r.shape.to_string())
        .collect();
    assert_eq!(
        shapes,
        [
            format!("{{kind=5, row=2, col={cols}, f32}}"),
            format!("{{2, 2, col={cols}, f32}}"),
        ]
    );

    let want_x = reference(format, &x);
    let gathered: Vec<u8> = ids
        .iter()
        .flat_map(|&i| &table[i as usize * row_bytes..(i as usize + 1) * row_bytes])
        .copied()
        .collect();
    let want_rows = reference(format, &gathered);
    let interp = program.interpret(&inputs);
    assert_bits(format, "interpreter", &interp[0], &want_x);
    assert_bits(format, "interpreter, gathered", &interp[1], &want_rows);
    let got = run_program(program, &inputs).unwrap_or_else(|e| panic!("{format:?}: {e}"));
    assert_bits(format, "CPU plugin", &got[0], &want_x);
    assert_bits(format, "CPU plugin, gathered", &got[1], &want_rows);
}

#[test]
fn every_format_decodes_like_the_reference() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for format in Format::ALL {
        check(format, &mut rng);
    }
}

#[test]
fn a_tensor_without_blocks_is_a_trace_error_at_the_callers_line() {
    // 35 bytes are not a whole number of 18-byte Q4_0 blocks.
    let x = Tensor::param(Shape::tagged(DType::U8, &[("row", 2), ("blocks:Q4_0", 35)]));
    let line = line!() + 1;
    let err = radix::trace_fn(&x, |x| dequantize(x, "col")).expect_err("a trace error");
    let e = err.as_trace().expect("a trace error");
    assert_eq!((e.op, e.file, e.line), ("dequantize", file!(), line));
    assert!(err.to_string().contains("not a blocks shape"), "{err}");
}
