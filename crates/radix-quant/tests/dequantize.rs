//! Decoded weights against the `gguf` Python package, bit for bit.
//!
//! `tests/fixtures/<format>.bin` holds raw blocks and the package's
//! dequantization of them (see `tests/fixtures/make.py`). Every path that
//! decodes weights must reproduce those f32 bits: the reference
//! `dequantize`, and each kernel on each instruction set this CPU runs,
//! read through one-hot activations (`W·e_j` is `w_j` exactly: the other
//! products are zeros and adding zeros is exact).

use radix_quant::{Config, Format, Isa, Serial, dequantize, matmul_with, matvec_with};

/// The fixture of `format`: raw blocks and the expected values.
fn fixture(format: Format) -> (Vec<u8>, Vec<f32>) {
    let name = format!("{format:?}").to_lowercase();
    let path = format!("{}/tests/fixtures/{name}.bin", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let per_block = format.block_bytes() + 4 * format.block_len();
    assert_eq!(
        bytes.len() % per_block,
        0,
        "{path}: not a whole number of blocks"
    );
    let n_blocks = bytes.len() / per_block;
    let (raw, values) = bytes.split_at(n_blocks * format.block_bytes());
    let values = values
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (raw.to_vec(), values)
}

/// `got` equals `expected` bit for bit, except that a zero may come back with
/// the other sign from a kernel (a sum of `-0.0` and `+0.0` is `+0.0`).
fn check(format: Format, path: &str, got: &[f32], expected: &[f32], signed_zeros: bool) {
    assert_eq!(got.len(), expected.len());
    for (j, (g, e)) in got.iter().zip(expected).enumerate() {
        let same = g.to_bits() == e.to_bits() || (!signed_zeros && *g == 0.0 && *e == 0.0);
        assert!(
            same,
            "{format:?} {path}: element {j} is {g:e} ({:#010x}), gguf says {e:e} ({:#010x})",
            g.to_bits(),
            e.to_bits()
        );
    }
}

#[test]
fn reference_equals_gguf_package() {
    for format in Format::ALL {
        let (raw, expected) = fixture(format);
        let mut got = vec![f32::NAN; expected.len()];
        dequantize(format, &raw, &mut got).expect("whole blocks");
        check(format, "dequantize", &got, &expected, true);
    }
}

#[test]
fn kernels_decode_like_gguf_package() {
    for isa in Isa::available() {
        let config = Config {
            isa,
            parallel: &Serial,
        };
        for format in Format::ALL {
            let (raw, expected) = fixture(format);
            // The fixture as one row; one-hot activations pick each weight.
            let cols = expected.len();
            let mut x = vec![0.0f32; cols];
            let mut y = [f32::NAN];
            let mut got = Vec::with_capacity(cols);
            for j in 0..cols {
                x[j] = 1.0;
                matvec_with(&config, format, &raw, 1, cols, &x, &mut y).expect("shapes");
                got.push(y[0]);
                x[j] = 0.0;
            }
            check(
                format,
                &format!("matvec ({})", isa.name()),
                &got,
                &expected,
                false,
            );

            // All one-hot vectors at once: y[t] = w_t.
            let mut identity = vec![0.0f32; cols * cols];
            for t in 0..cols {
                identity[t * cols + t] = 1.0;
            }
            let mut got = vec![f32::NAN; cols];
            matmul_with(&config, format, &raw, 1, cols, cols, &identity, &mut got).expect("shapes");
            check(
                format,
                &format!("matmul ({})", isa.name()),
                &got,
                &expected,
                false,
            );
        }
    }
}

#[test]
fn ggml_type_ids_round_trip() {
    for format in Format::ALL {
        assert_eq!(Format::from_ggml_type(format.ggml_type()), Ok(format));
    }
    // Q8_1, Q2_K and Q3_K exist in GGUF but are not decoded here.
    for id in [9, 10, 11, 31] {
        assert_eq!(
            Format::from_ggml_type(id),
            Err(radix_quant::Error::UnsupportedType(id))
        );
    }
}
