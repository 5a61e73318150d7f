//! Comparing greedy ids so that a near tie is told from a bug: the top-2
//! logit margin at the step where two sequences part. Also compiled into
//! `radix-cli`'s `generate` test.

/// A top-2 logit margin under this is a near tie: ten times the 1e-3 by
/// which radix's logits may differ from transformers' (and far more than
/// two radix runs in other batch shapes differ by), so which of the two ids
/// wins there may turn on roundoff rather than on a bug.
pub const NEAR_TIE: f32 = 1e-2;

/// How far the largest logit leads the next largest.
pub fn top2_margin(logits: &[f32]) -> f32 {
    let (mut first, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &x in logits {
        if x > first {
            (first, second) = (x, first);
        } else if x > second {
            second = x;
        }
    }
    first - second
}

/// Checks that greedy ids `got` equal `want`, up to a near tie. At the
/// first step where they differ, `margin(k)` is radix's top-2 logit margin
/// there (of the logits `got[k]` was picked from). Under [`NEAR_TIE`] the two
/// ids are equally good picks, which roundoff decides (another XLA fusion,
/// another instruction set, an f16 cache): from there on the two sequences
/// continue different texts, so the comparison ends at that step, reported
/// with its margin on stderr. Otherwise the difference is real and fails,
/// naming the margin.
#[track_caller]
pub fn assert_greedy_eq(what: &str, got: &[u32], want: &[u32], margin: impl FnOnce(usize) -> f32) {
    assert_greedy_eq_within(what, got, want, margin, NEAR_TIE);
}

/// [`assert_greedy_eq`] where a margin under `near_tie` is a near tie: for
/// computations known to differ by more than [`NEAR_TIE`] (the 8-bit
/// products of steps of other lengths).
#[track_caller]
pub fn assert_greedy_eq_within(
    what: &str,
    got: &[u32],
    want: &[u32],
    margin: impl FnOnce(usize) -> f32,
    near_tie: f32,
) {
    let Some(k) = (0..got.len().min(want.len())).find(|&k| got[k] != want[k]) else {
        assert_eq!(got, want, "{what}: greedy ids of other lengths");
        return;
    };
    let m = margin(k);
    if m < near_tie {
        eprintln!(
            "{what}: greedy ids part at step {k} ({} here, {} expected; equal before) at a near \
             tie: radix's top two logits there are {m:.2e} apart (under {near_tie:.0e}), so \
             roundoff decides it; compared up to there\n got: {got:?}\nwant: {want:?}",
            got[k], want[k]
        );
        return;
    }
    panic!(
        "{what}: greedy ids differ at step {k} ({} here, {} expected; equal before), where \
         radix's top two logits are {m:.2e} apart: no tie\n got: {got:?}\nwant: {want:?}",
        got[k], want[k]
    );
}
