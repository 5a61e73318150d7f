//! F32 weights packed in panels: packing round-trips, every instruction set
//! gives the scalar reference's bits (one `mul_add` chain per output), the
//! products equal an f64 reference within f32 rounding, and bad shapes are
//! errors that leave `y` alone.

mod common;

use common::{FineGrained, Rng, random_x};
use radix_quant::{
    Config, Error, Isa, PANEL_ROWS, ScopedThreads, Serial, matmul_panels_with, pack_panels,
    unpack_panels,
};

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}

/// `W·x[t]` for each token on `isa` and `parallel`, `W` packed from `w`.
fn product(
    isa: Isa,
    parallel: &dyn radix_quant::Parallel,
    w: &[f32],
    (rows, cols): (usize, usize),
    x: &[f32],
) -> Vec<f32> {
    let panels = pack_panels(rows, cols, &f32_bytes(w)).expect("whole panels");
    let n_tokens = x.len() / cols;
    let mut y = vec![f32::NAN; n_tokens * rows];
    let config = Config { isa, parallel };
    matmul_panels_with(&config, &panels, rows, cols, n_tokens, x, &mut y).expect("shapes");
    y
}

#[test]
fn packing_round_trips_and_puts_a_panels_rows_side_by_side() {
    let (rows, cols) = (32, 5);
    let w: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
    let packed = pack_panels(rows, cols, &f32_bytes(&w)).unwrap();
    let at = |i: usize| f32::from_le_bytes(packed[i * 4..][..4].try_into().unwrap());
    // Panel 1, element k = 2, row j = 3: row 19, column 2.
    assert_eq!(
        at(PANEL_ROWS * cols + 2 * PANEL_ROWS + 3),
        (19 * cols + 2) as f32
    );
    assert_eq!(unpack_panels(rows, cols, &packed).unwrap(), f32_bytes(&w));
}

#[test]
fn every_instruction_set_gives_the_reference_bits() {
    let mut rng = Rng(29);
    let isas = Isa::available();
    let names: Vec<&str> = isas.iter().map(|isa| isa.name()).collect();
    eprintln!("panel kernels compared with the scalar reference: {names:?}");
    // Rows of 1, 3 and 5 panels (whole and partial steps of 3), odd
    // columns, and token counts around every step size (8, 6, 4, 2, 1).
    for (rows, cols) in [(16, 7), (48, 33), (80, 384)] {
        let w: Vec<f32> = random_x(rows * cols, &mut rng);
        for n_tokens in [1, 2, 3, 7, 8, 13, 16, 20] {
            let x = random_x(n_tokens * cols, &mut rng);
            let want = bits(&product(Isa::SCALAR, &Serial, &w, (rows, cols), &x));
            for &isa in &isas {
                let got = product(isa, &Serial, &w, (rows, cols), &x);
                assert_eq!(
                    bits(&got),
                    want,
                    "{rows}×{cols}×{n_tokens} on {}",
                    isa.name()
                );
            }
        }
    }
}

#[test]
fn products_equal_the_f64_reference_within_f32_rounding() {
    let mut rng = Rng(31);
    let (rows, cols, n_tokens) = (64, 200, 9);
    let w = random_x(rows * cols, &mut rng);
    let x = random_x(n_tokens * cols, &mut rng);
    let got = product(Isa::best(), &Serial, &w, (rows, cols), &x);
    for (t, x) in x.chunks_exact(cols).enumerate() {
        for (r, w) in w.chunks_exact(cols).enumerate() {
            let terms = w.iter().zip(x).map(|(&w, &x)| f64::from(w) * f64::from(x));
            let want: f64 = terms.clone().sum();
            // A chain of `cols` roundings, each within half an ulp of the
            // partial sum, bounded by the sum of the terms' magnitudes.
            let bound: f64 =
                terms.map(f64::abs).sum::<f64>() * cols as f64 * f64::from(f32::EPSILON);
            let got = f64::from(got[t * rows + r]);
            assert!(
                (got - want).abs() <= bound,
                "y[{t}][{r}] = {got}, want {want}"
            );
        }
    }
}

/// Split by panels (a few tokens) or by tokens (a prompt), on one thread
/// or several, with tasks coarse or fine: the same bits.
#[test]
fn threads_and_splits_do_not_change_results() {
    let mut rng = Rng(37);
    let (rows, cols) = (96, 40);
    let w = random_x(rows * cols, &mut rng);
    let fine = FineGrained(ScopedThreads::new(3));
    let scoped = ScopedThreads::new(4);
    for n_tokens in [5, 16, 1100] {
        let x = random_x(n_tokens * cols, &mut rng);
        let isa = Isa::best();
        let want = bits(&product(isa, &Serial, &w, (rows, cols), &x));
        assert_eq!(bits(&product(isa, &fine, &w, (rows, cols), &x)), want);
        assert_eq!(bits(&product(isa, &scoped, &w, (rows, cols), &x)), want);
    }
}

#[test]
fn bad_shapes_are_errors_and_leave_y_alone() {
    let config = Config {
        isa: Isa::best(),
        parallel: &Serial,
    };
    assert_eq!(
        pack_panels(20, 4, &[0; 20 * 4 * 4]),
        Err(Error::PartialPanel { rows: 20 })
    );
    let panels = vec![0u8; 16 * 4 * 4];
    let x = vec![1.0f32; 2 * 4];
    let mut y = vec![7.0f32; 2 * 16];
    let short = matmul_panels_with(&config, &panels[4..], 16, 4, 2, &x, &mut y);
    assert!(matches!(short, Err(Error::Length { .. })), "{short:?}");
    let long_x = matmul_panels_with(&config, &panels, 16, 4, 2, &[0.0; 9], &mut y);
    assert!(
        matches!(long_x, Err(Error::Length { what: "x", .. })),
        "{long_x:?}"
    );
    assert!(y.iter().all(|&v| v == 7.0));
    // No columns: empty dots.
    matmul_panels_with(&config, &[], 16, 0, 2, &[], &mut y).unwrap();
    assert!(y.iter().all(|&v| v == 0.0));
}
