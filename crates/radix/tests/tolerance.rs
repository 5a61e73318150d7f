//! The shared float comparison (`radix::testing::Tol`): it accepts what
//! another CPU's summation order does to a result and rejects real bugs (a
//! wrong axis, a missing term, a rounding to bf16).

use radix::DType;
use radix::testing::{Tol, compare};

/// Deterministic standard-normal-ish values (sum of 4 uniforms, centred).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    let mut uniform = || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| ((0..4).map(|_| uniform()).sum::<f64>() - 2.0) as f32 * 1.7)
        .collect()
}

/// `a (m, n) @ b (n, p)` in f32, summing each dot product in `lanes`
/// interleaved partial sums with fused multiply-adds, then adding the lanes
/// up: what a vectorized kernel of that width does.
fn matmul(a: &[f32], b: &[f32], (m, n, p): (usize, usize, usize), lanes: usize) -> Vec<f64> {
    let mut res = vec![];
    for i in 0..m {
        for j in 0..p {
            let mut acc = vec![0f32; lanes];
            for k in 0..n {
                acc[k % lanes] = a[i * n + k].mul_add(b[k * p + j], acc[k % lanes]);
            }
            res.push(f64::from(acc.iter().rev().sum::<f32>()));
        }
    }
    res
}

const DIMS: (usize, usize, usize) = (8, 64, 8);

fn operands() -> (Vec<f32>, Vec<f32>) {
    (values(DIMS.0 * DIMS.1, 1), values(DIMS.1 * DIMS.2, 2))
}

fn sum_tol() -> Tol {
    Tol::sum(DType::F32, DIMS.1, 1.0)
}

#[test]
fn another_summation_order_is_close() {
    let (a, b) = operands();
    let scalar = matmul(&a, &b, DIMS, 1);
    for lanes in [4, 8, 16, 32] {
        let vector = matmul(&a, &b, DIMS, lanes);
        assert!(scalar != vector, "{lanes} lanes changed nothing");
        compare(&vector, &scalar, sum_tol()).unwrap();
    }
}

#[test]
fn a_missing_term_is_not_close() {
    let (a, mut b) = operands();
    let want = matmul(&a, &b, DIMS, 1);
    // Drop one product from one dot product (a term of typical size).
    let k = (0..DIMS.1)
        .find(|&k| (a[k] * b[k * DIMS.2]).abs() > 0.3)
        .unwrap();
    let mut a2 = a.clone();
    a2[k] = 0.0;
    let got = matmul(&a2, &b, DIMS, 8);
    let err = compare(&got, &want, sum_tol()).unwrap_err();
    assert!(err.starts_with("at 0:"), "{err}");
    // Or one input element wrong in its last bits only: still close.
    b[0] = f32::from_bits(b[0].to_bits() + 1);
    compare(&matmul(&a, &b, DIMS, 8), &want, sum_tol()).unwrap();
}

#[test]
fn a_wrong_axis_is_not_close() {
    let (a, b) = operands();
    let want = matmul(&a, &b, DIMS, 1);
    // The result read with its axes swapped.
    let (m, p) = (DIMS.0, DIMS.2);
    let transposed: Vec<f64> = (0..m * p).map(|i| want[(i % m) * p + i / m]).collect();
    assert!(compare(&transposed, &want, sum_tol()).is_err());
}

#[test]
fn a_bf16_rounding_is_not_close() {
    let (a, b) = operands();
    let want = matmul(&a, &b, DIMS, 1);
    let rounded: Vec<f64> = want
        .iter()
        .map(|&v| half::bf16::from_f64(v).to_f64())
        .collect();
    assert!(compare(&rounded, &want, sum_tol()).is_err());
    // Elementwise f32 results: a bf16 rounding is far outside a few units
    // of f32 roundoff, one f32 rounding inside.
    let single: Vec<f64> = want.iter().map(|&v| f64::from(v as f32)).collect();
    compare(&single, &want, Tol::ulps(DType::F32, 1.0)).unwrap();
    assert!(compare(&rounded, &want, Tol::ulps(DType::F32, 16.0)).is_err());
    // And bf16 results themselves get one bf16 rounding, not two.
    compare(&rounded, &want, Tol::ulps(DType::BF16, 1.0)).unwrap();
    let coarse: Vec<f64> = want.iter().map(|v| v * (1.0 + 2.0 / 128.0)).collect();
    assert!(compare(&coarse, &want, Tol::ulps(DType::BF16, 1.0)).is_err());
}

#[test]
fn nan_and_infinities_match_only_themselves() {
    let tol = Tol::sum(DType::F32, 1000, 1e6);
    assert!(tol.close(f64::NAN, f64::NAN));
    assert!(!tol.close(0.0, f64::NAN));
    assert!(!tol.close(f64::NAN, 0.0));
    assert!(tol.close(f64::INFINITY, f64::INFINITY));
    assert!(!tol.close(f64::MAX, f64::INFINITY));
    assert!(!tol.close(f64::NEG_INFINITY, f64::INFINITY));
    assert!(!tol.close(f64::INFINITY, 1.0));
}

#[test]
fn exact_is_exact() {
    assert!(Tol::EXACT.close(3.0, 3.0));
    assert!(!Tol::EXACT.close(3.0, 3.0 + f64::EPSILON * 4.0));
    assert_eq!(Tol::ulps(DType::I32, 8.0), Tol::EXACT);
}
