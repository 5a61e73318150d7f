//! `y = W·x` on raw blocks: argument checks, the split over rows, and the
//! choice of instruction set. The per-ISA code (`scalar.rs`, `avx2.rs`) sees
//! only slices whose lengths were checked here.

mod avx2;
mod avx512;
mod dot_k;
mod dot_vnni;
mod lanes;
mod panels;
mod prompt_q8;
mod q8;
mod scalar;
mod split;
mod stacked;

use std::sync::{LazyLock, Mutex};

use crate::{Error, Format, Parallel, ScopedThreads};

pub use panels::{
    PANEL_ROWS, matmul_panels_f32_with, matmul_panels_with, pack_panels, pack_panels_f32,
    unpack_panels,
};
use q8::Q8Activations;
pub use q8::{
    DOT_MAX_TOKENS, matmul_q8_dots_laid_out_with, matmul_q8_dots_with, matmul_q8_laid_out_with,
    matmul_q8_with, matvec_q8_with,
};
pub use split::{RowLayout, join_rows, split_parts, split_rows};
pub use stacked::{Stacked, matvec_q8_stacked_with};

/// An instruction set the kernels can use. Only [`Isa::SCALAR`] can be named;
/// the others come from [`Isa::best`] and [`Isa::available`], which detect
/// them at run time, so a kernel the CPU cannot run is never selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isa(Kind);

/// In order: each runs what the ones before it run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Scalar,
    /// AVX2 with FMA and F16C (Haswell, Zen and later).
    Avx2,
    /// AVX-512F besides AVX2 (Skylake-SP and later): the AVX2
    /// kernels, and 16-lane multiply-adds for prompts.
    Avx512,
    /// [`Kind::Avx512`] with VNNI's byte products (Ice Lake, Zen 4 and
    /// later): a prompt's 8-bit products as integer multiply-adds, and a
    /// decode step's 8-bit dots two blocks at a time (`dot_vnni.rs`).
    Avx512Vnni,
}

impl Isa {
    /// Portable Rust, on any CPU.
    pub const SCALAR: Isa = Isa(Kind::Scalar);

    /// The fastest instruction set this CPU runs, or the fastest up to
    /// the one [`MAX_ISA_VAR`] names: to compare the paths on one machine
    /// (an AVX-512 machine's figures for an AVX2 one), or to step around a
    /// path. Read once; a value that names no instruction set is reported
    /// on stderr and changes nothing.
    pub fn best() -> Isa {
        *BEST
    }

    /// The fastest of [`Isa::available`] that is at most `cap`.
    fn best_within(cap: Option<Isa>) -> Isa {
        let fits = |isa: &&Isa| cap.is_none_or(|cap| isa.0 <= cap.0);
        let isas = Isa::available();
        *isas.iter().rfind(fits).expect("scalar is always available")
    }

    /// The instruction set called `name` ([`Isa::name`]), whether or not
    /// this CPU runs it.
    pub fn from_name(name: &str) -> Option<Isa> {
        [Kind::Scalar, Kind::Avx2, Kind::Avx512, Kind::Avx512Vnni]
            .into_iter()
            .map(Isa)
            .find(|isa| isa.name() == name)
    }

    /// Every instruction set this CPU runs, slowest first; tests run each.
    pub fn available() -> Vec<Isa> {
        let mut isas = vec![Isa::SCALAR];
        if avx2::detected() {
            isas.push(Isa(Kind::Avx2));
        }
        if avx512::detected() {
            isas.push(Isa(Kind::Avx512));
        }
        if avx512::vnni_detected() {
            isas.push(Isa(Kind::Avx512Vnni));
        }
        isas
    }

    /// A short name for reports: `scalar`, `avx2`, `avx512`, `avx512-vnni`.
    pub fn name(self) -> &'static str {
        match self.0 {
            Kind::Scalar => "scalar",
            Kind::Avx2 => "avx2",
            Kind::Avx512 => "avx512",
            Kind::Avx512Vnni => "avx512-vnni",
        }
    }

    /// Whether [`matmul_q8_with`] multiplies a prompt (more than
    /// [`DOT_MAX_TOKENS`] tokens) with 8-bit activations on this instruction
    /// set: with VNNI, and in the scalar reference. AVX2 and AVX-512 without
    /// VNNI have no byte product that cannot saturate for every format, and
    /// their f32 tiles are faster than emulating one, so they compute a
    /// prompt's exact products instead.
    pub fn integer_prompts(self) -> bool {
        matches!(self.0, Kind::Scalar | Kind::Avx512Vnni)
    }

    /// Whether this instruction set's dots read rows split at load
    /// ([`RowLayout::Split`]) as they are, and faster than blocks: with
    /// VNNI. The others join split rows back into blocks first, so a
    /// loader splits rows only where this holds.
    pub fn reads_split_rows(self) -> bool {
        self.0 == Kind::Avx512Vnni
    }
}

/// The environment variable that caps the instruction set of
/// [`Isa::best`]: `scalar`, `avx2`, `avx512` or `avx512-vnni`.
pub const MAX_ISA_VAR: &str = "RADIX_MAX_ISA";

/// [`Isa::best`], found once.
static BEST: LazyLock<Isa> = LazyLock::new(|| {
    let cap = std::env::var(MAX_ISA_VAR).ok().filter(|v| !v.is_empty());
    let cap = cap.and_then(|value| {
        let isa = Isa::from_name(&value);
        if isa.is_none() {
            eprintln!(
                "{MAX_ISA_VAR}={value:?} names no instruction set (scalar, avx2, avx512, \
                 avx512-vnni): the kernels use the CPU's best"
            );
        }
        isa
    });
    Isa::best_within(cap)
});

/// Where and how a kernel runs.
#[derive(Clone, Copy)]
pub struct Config<'a> {
    pub isa: Isa,
    pub parallel: &'a dyn Parallel,
}

/// `y = W·x` with the best instruction set and one scoped thread per core:
/// `weights` is `rows × cols` in `format`, `x` has `cols` elements, `y` has
/// `rows`.
pub fn matvec(
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    with_best(|config| matvec_with(config, format, weights, rows, cols, x, y))
}

/// `f` of the best instruction set and one scoped thread per core.
fn with_best<R>(f: impl FnOnce(&Config) -> R) -> R {
    let threads = ScopedThreads::available();
    f(&Config {
        isa: Isa::best(),
        parallel: &threads,
    })
}

/// [`matvec`] with a chosen instruction set and thread pool.
pub fn matvec_with(
    config: &Config,
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    let row_bytes = check_matvec(format, weights, rows, cols, x, y)?;
    let isa = config.isa;
    for_rows(config, weights, row_bytes, 1, y, &|row, y| {
        y[0] = dot_row(isa, format, row, x);
    });
    Ok(())
}

/// Splits `rows` (each `row_bytes` of weights) into tasks of a multiple of
/// `align` rows and runs `task(first, n_rows, out)` for each on the pool:
/// `out` is the task's results, token-major (`n_tokens × n_rows`), in a
/// buffer its thread keeps from task to task, then copied into its band of
/// `y` (`n_tokens × rows`), a copy tiny next to the products. The bands are
/// disjoint, so the copies take no lock: for the 16 tokens of a sentence
/// a lock and an allocation per task cost as much as a tenth of the
/// products.
fn for_row_tasks(
    config: &Config,
    (rows, row_bytes, align): (usize, usize, usize),
    n_tokens: usize,
    y: &mut [f32],
    task: &(dyn Fn(usize, usize, &mut [f32]) + Sync),
) {
    if rows == 0 || n_tokens == 0 {
        return;
    }
    assert_eq!(y.len(), n_tokens * rows, "y holds n_tokens × rows outputs");
    let rows_per_task = rows_per_task(config, rows, row_bytes, align);
    let n_tasks = rows.div_ceil(rows_per_task);
    let y = Bands(y.as_mut_ptr());
    config.parallel.run(n_tasks, &|i| {
        let first = i * rows_per_task;
        let n_rows = rows_per_task.min(rows - first);
        // Taken out of the thread's cell while in use: a task that ran
        // another `for_row_tasks` on this thread would find it empty.
        let mut out = TASK_OUT.take();
        out.clear();
        out.resize(n_tokens * n_rows, 0.0);
        task(first, n_rows, &mut out);
        for t in 0..n_tokens {
            // SAFETY: `y` holds `n_tokens × rows` values (asserted above)
            // and outlives the run; task `i` writes only the columns
            // `first..first + n_rows` of each token, which no other task
            // writes or reads.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    out[t * n_rows..].as_ptr(),
                    y.at(t * rows + first),
                    n_rows,
                );
            }
        }
        TASK_OUT.set(out);
    });
}

thread_local! {
    /// [`for_row_tasks`]'s buffer of one task's results, kept by each
    /// thread that runs tasks.
    static TASK_OUT: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The outputs [`for_row_tasks`]'s tasks write in disjoint bands.
#[derive(Clone, Copy)]
struct Bands(*mut f32);

impl Bands {
    /// The address of output `i` (a method, so that closures capture the
    /// `Bands`, which is `Sync`, not its raw pointer).
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

// SAFETY: tasks on other threads write through the pointer only in their
// own bands (see `for_row_tasks`).
unsafe impl Send for Bands {}
// SAFETY: as above.
unsafe impl Sync for Bands {}

/// `dot(row r, y[r * per_row..][..per_row])` over tasks of whole rows: `y`
/// has `per_row` outputs for each row of `weights`.
fn for_rows(
    config: &Config,
    weights: &[u8],
    row_bytes: usize,
    per_row: usize,
    y: &mut [f32],
    dot: &(dyn Fn(&[u8], &mut [f32]) + Sync),
) {
    for_row_groups(config, weights, (row_bytes, 1), per_row, y, dot);
}

/// [`for_rows`] handing `dot` up to `group` consecutive rows at a time
/// (`rows`, and their `y` of `per_row` each), so that it can multiply them
/// together; a task's rows are whole groups but for the last task's.
fn for_row_groups(
    config: &Config,
    weights: &[u8],
    (row_bytes, group): (usize, usize),
    per_row: usize,
    y: &mut [f32],
    dot: &(dyn Fn(&[u8], &mut [f32]) + Sync),
) {
    if row_bytes == 0 {
        // Rows of no elements: empty dots.
        y.fill(0.0);
        return;
    }
    if y.is_empty() || per_row == 0 {
        return;
    }
    let n_rows = y.len() / per_row;
    let rows_per_task = rows_per_task(config, n_rows, row_bytes, group);
    // One lock per task, taken once: the tasks' rows are disjoint.
    let parts: Vec<Mutex<&mut [f32]>> = y
        .chunks_mut(rows_per_task * per_row)
        .map(Mutex::new)
        .collect();
    config.parallel.run(parts.len(), &|task| {
        let mut part = parts[task].lock().unwrap_or_else(|e| e.into_inner());
        let first = task * rows_per_task;
        row_groups_task(weights, (row_bytes, group), per_row, first, &mut part, dot);
    });
}

/// A task of [`for_row_groups`]: `dot` on the rows from `first` on, up to
/// `group` at a time, whose outputs (`per_row` each) are `part`.
fn row_groups_task(
    weights: &[u8],
    (row_bytes, group): (usize, usize),
    per_row: usize,
    first: usize,
    part: &mut [f32],
    dot: &(dyn Fn(&[u8], &mut [f32]) + Sync),
) {
    let rows = &weights[first * row_bytes..][..part.len() / per_row * row_bytes];
    let outs = part.chunks_mut(group * per_row);
    for (i, (out, rows)) in outs.zip(rows.chunks(group * row_bytes)).enumerate() {
        let at = (first + i * group) * row_bytes + PREFETCH_AHEAD;
        prefetch(weights.get(at..(at + rows.len()).min(weights.len())));
        dot(rows, out);
    }
}

/// How far ahead of the row being multiplied [`for_rows`] asks for weights.
/// A row is a few hundred bytes, and the loads of one row's dot are too few
/// to keep memory busy: measured on a 2-core Xeon (2.6 GHz, AVX-512), one
/// SmolLM2 token's matrices took 29.4 ms on one thread without prefetching,
/// 20.7 ms at 512 bytes ahead, 14.5 ms at 2 KiB and 16 ms at 4 KiB.
const PREFETCH_AHEAD: usize = 2048;

/// Asks the CPU to bring `bytes` into its caches (a hint: nothing is read,
/// and nothing happens off x86-64).
fn prefetch(bytes: Option<&[u8]>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(bytes) = bytes {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        for line in bytes.chunks(64) {
            // SAFETY: a prefetch reads nothing and cannot fault; SSE is
            // part of x86-64.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// `y[t] = W·x[t]` for `t` in `0..n_tokens`, with the best instruction set
/// and one scoped thread per core: `x` is `n_tokens × cols` and `y` is
/// `n_tokens × rows`, both row-major. Each tile of rows is decoded once and
/// used for every token.
pub fn matmul(
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    n_tokens: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    with_best(|config| matmul_with(config, format, weights, rows, cols, n_tokens, x, y))
}

/// Rows decoded at once by [`matmul`]: four f32 rows of a 1536-wide matrix
/// (24 KiB) stay in L1 while every token streams past them.
const TILE_ROWS: usize = 4;

/// The f32 bytes of a tile with the tokens in [`TokenLanes`].
const LANES_TILE_BYTES: usize = 96 * 1024;

/// [`matmul`] with a chosen instruction set and thread pool.
#[allow(clippy::too_many_arguments)] // the matrix, its shape, the tokens: none is optional
pub fn matmul_with(
    config: &Config,
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    n_tokens: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    let row_bytes = check_matmul(format, weights, (rows, cols, n_tokens), x, y)?;
    if no_products(rows, cols, n_tokens, y) {
        return Ok(());
    }
    let isa = config.isa;
    if let Some(per_task) = tokens_per_task(config, format, n_tokens) {
        matmul_lanes_by_tokens(
            config,
            (format, row_bytes),
            weights,
            (rows, cols),
            x,
            y,
            per_task,
        );
        return Ok(());
    }
    // Transposed once for all tasks: a copy of `x`, small beside the products.
    let by_lanes =
        TokenLanes::wanted(isa, n_tokens).then(|| TokenLanes::new(isa, x, cols, n_tokens));
    let (align, tile_rows) = match by_lanes {
        Some(_) => (TokenLanes::rows(isa), TokenLanes::tile_rows(isa, cols)),
        None => (TILE_ROWS, TILE_ROWS),
    };
    for_row_tasks(
        config,
        (rows, row_bytes, align),
        n_tokens,
        y,
        &|first, n_rows, out| {
            let mut decoded = Vec::new();
            for tile_first in (0..n_rows).step_by(tile_rows) {
                let tile_rows = tile_rows.min(n_rows - tile_first);
                let bytes = &weights[(first + tile_first) * row_bytes..][..tile_rows * row_bytes];
                let tile = Tile {
                    rows: f32_tile(isa, (format, row_bytes), bytes, cols, &mut decoded),
                    cols,
                    first: tile_first,
                };
                match &by_lanes {
                    Some(lanes) => dot_tile_lanes(isa, &tile, lanes, out, n_rows),
                    None => dot_tile(isa, &tile, x, out, n_rows),
                }
            }
        },
    );
    Ok(())
}

/// Whether a product of these sizes has nothing to multiply: `y` is then
/// done (zeros for rows of no columns, empty dots).
fn no_products(rows: usize, cols: usize, n_tokens: usize, y: &mut [f32]) -> bool {
    if cols == 0 {
        y.fill(0.0);
    }
    cols == 0 || rows == 0 || n_tokens == 0
}

/// Tokens per task where [`matmul_with`] splits a prompt by tokens rather
/// than rows: for F32 weights (read in place, so no task decodes what
/// another does) and enough tokens for two vectors of lanes per task. Each
/// task then owns whole rows of `y` and writes its products there, where a
/// split by rows writes a buffer of its own and copies it in (MiniLM's
/// 4096 tokens × 1536 rows: 25 MB zeroed, written and copied per product).
fn tokens_per_task(config: &Config, format: Format, n_tokens: usize) -> Option<usize> {
    let group = TokenLanes::lanes(config.isa)? * lanes::LANE_VECTORS;
    let n_tasks = config.parallel.n_threads() * config.parallel.tasks_per_thread().max(1);
    let per_task = n_tokens.div_ceil(n_tasks.max(1)).next_multiple_of(group);
    (format == Format::F32 && n_tokens >= 2 * group).then_some(per_task)
}

/// [`matmul_with`] of F32 weights split by tokens: each task transposes its
/// own tokens into lanes and passes every tile of rows over them.
fn matmul_lanes_by_tokens(
    config: &Config,
    (format, row_bytes): (Format, usize),
    weights: &[u8],
    (rows, cols): (usize, usize),
    x: &[f32],
    y: &mut [f32],
    per_task: usize,
) {
    let isa = config.isa;
    let tile_rows = TokenLanes::tile_rows(isa, cols);
    for_token_tasks(config, (x, cols), (y, rows), per_task, &|x, y| {
        let lanes = TokenLanes::new(isa, x, cols, x.len() / cols);
        let mut decoded = Vec::new();
        for first in (0..rows).step_by(tile_rows) {
            let n_rows = tile_rows.min(rows - first);
            let bytes = &weights[first * row_bytes..][..n_rows * row_bytes];
            let tile = Tile {
                rows: f32_tile(isa, (format, row_bytes), bytes, cols, &mut decoded),
                cols,
                first,
            };
            dot_tile_lanes(isa, &tile, &lanes, y, rows);
        }
    });
}

/// `task(x, y)` on the pool for consecutive chunks of `per_task` tokens:
/// `x` (each token `cols` long) and `y` (each `rows` long) cut alike, so
/// each task writes whole rows of `y`.
fn for_token_tasks(
    config: &Config,
    (x, cols): (&[f32], usize),
    (y, rows): (&mut [f32], usize),
    per_task: usize,
    task: &(dyn Fn(&[f32], &mut [f32]) + Sync),
) {
    let parts: Vec<Mutex<(&[f32], &mut [f32])>> = x
        .chunks(per_task * cols)
        .zip(y.chunks_mut(per_task * rows))
        .map(Mutex::new)
        .collect();
    config.parallel.run(parts.len(), &|i| {
        let mut part = parts[i].lock().unwrap_or_else(|e| e.into_inner());
        let (x, y) = &mut *part;
        task(x, y);
    });
}

/// The f32 rows of `bytes` (whole rows of `format`): the bytes themselves
/// where they are aligned F32 ([`f32_rows`]), else decoded into `decoded`.
fn f32_tile<'a>(
    isa: Isa,
    (format, row_bytes): (Format, usize),
    bytes: &'a [u8],
    cols: usize,
    decoded: &'a mut Vec<f32>,
) -> &'a [f32] {
    if let Some(rows) = f32_rows(format, bytes) {
        return rows;
    }
    decoded.resize(bytes.len() / row_bytes.max(1) * cols, 0.0);
    for (row, out) in bytes
        .chunks_exact(row_bytes)
        .zip(decoded.chunks_exact_mut(cols))
    {
        dequantize_row(isa, format, row, out);
    }
    decoded
}

/// F32 weights read in place as the tile, where their bytes are aligned: a
/// copy would read every weight twice for a few tokens (measured on
/// all-MiniLM-L6-v2, 16 tokens: the copy took more samples than the
/// products).
fn f32_rows(format: Format, bytes: &[u8]) -> Option<&[f32]> {
    if format != Format::F32 || cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: every bit pattern is an f32; `align_to` puts in `rows` only
    // whole, aligned f32s.
    let (head, rows, tail) = unsafe { bytes.align_to::<f32>() };
    (head.is_empty() && tail.is_empty()).then_some(rows)
}

/// Rows per task: a multiple of `align`, at most the pool's tasks per thread, and no
/// task smaller than the pool's `min_task_bytes` unless the matrix is.
fn rows_per_task(config: &Config, rows: usize, row_bytes: usize, align: usize) -> usize {
    let by_size = (rows * row_bytes / config.parallel.min_task_bytes().max(1)).max(1);
    let per_thread = config.parallel.tasks_per_thread().max(1);
    let n_tasks = (config.parallel.n_threads() * per_thread).clamp(1, by_size);
    rows.div_ceil(n_tasks).next_multiple_of(align)
}

/// The checks of a matvec's lengths; the bytes of a weight row.
fn check_matvec(
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &[f32],
) -> Result<usize, Error> {
    let row_bytes = check_weights(format, weights, rows, cols)?;
    check_len("x", x.len(), cols)?;
    check_len("y", y.len(), rows)?;
    Ok(row_bytes)
}

/// The checks of a matmul's lengths (`shape` is rows, cols and tokens);
/// the bytes of a weight row.
fn check_matmul(
    format: Format,
    weights: &[u8],
    (rows, cols, n_tokens): (usize, usize, usize),
    x: &[f32],
    y: &[f32],
) -> Result<usize, Error> {
    let row_bytes = check_weights(format, weights, rows, cols)?;
    check_len("x", x.len(), product("x", n_tokens, cols)?)?;
    check_len("y", y.len(), product("y", n_tokens, rows)?)?;
    Ok(row_bytes)
}

fn check_weights(format: Format, weights: &[u8], rows: usize, cols: usize) -> Result<usize, Error> {
    let row_bytes = format.row_bytes(cols)?;
    check_len(
        "weights (bytes)",
        weights.len(),
        product("weights", rows, row_bytes)?,
    )?;
    Ok(row_bytes)
}

/// `a · b`, or `Err` where a caller's shape would overflow.
fn product(what: &'static str, a: usize, b: usize) -> Result<usize, Error> {
    a.checked_mul(b).ok_or(Error::TooLarge { what })
}

fn check_len(what: &'static str, got: usize, expected: usize) -> Result<(), Error> {
    if got != expected {
        return Err(Error::Length {
            what,
            expected,
            got,
        });
    }
    Ok(())
}

/// One row (whole blocks) times `x`, which has the row's length.
fn dot_row(isa: Isa, format: Format, row: &[u8], x: &[f32]) -> f32 {
    match isa.0 {
        Kind::Scalar => scalar::dot_row(format, row, x),
        Kind::Avx2 | Kind::Avx512 | Kind::Avx512Vnni => avx2::dot_row(format, row, x),
    }
}

/// One row (whole blocks) decoded into `out`, which has the row's length.
fn dequantize_row(isa: Isa, format: Format, row: &[u8], out: &mut [f32]) {
    match isa.0 {
        Kind::Scalar => scalar::dequantize_row(format, row, out),
        Kind::Avx2 | Kind::Avx512 | Kind::Avx512Vnni => avx2::dequantize_row(format, row, out),
    }
}

/// Rows of f32 weights decoded for [`matmul`].
struct Tile<'a> {
    /// `rows.len() / cols` rows of `cols` weights.
    rows: &'a [f32],
    cols: usize,
    /// The index of the tile's first row among the task's rows.
    first: usize,
}

/// For every token `t` (each `tile.cols` long in `x`) and row `r` of the tile:
/// `out[t * stride + tile.first + r] = tile.rows[r]·x[t]`.
fn dot_tile(isa: Isa, tile: &Tile, x: &[f32], out: &mut [f32], stride: usize) {
    match isa.0 {
        Kind::Scalar => scalar::dot_tile(tile, x, out, stride),
        Kind::Avx2 | Kind::Avx512 | Kind::Avx512Vnni => avx2::dot_tile(tile, x, out, stride),
    }
}

/// The tokens of [`matmul`]'s `x` transposed into groups of `lanes` (a vector of f32):
/// `data[(g * cols + k) * lanes + l]` is element `k` of token `g * lanes + l`
/// (zero past the last token). With the tokens along a vector, one weight
/// broadcast multiplies a whole group: each output is one chain of fused
/// multiply-adds along the row, as in a BLAS micro-kernel, instead of a dot
/// per (row, token) pair that ends in a horizontal sum.
struct TokenLanes {
    data: Vec<f32>,
    cols: usize,
    n_tokens: usize,
    /// Tokens per group: one vector of f32 of the instruction set.
    lanes: usize,
}

impl TokenLanes {
    /// Tokens per group on `isa`: one vector of f32 (none for scalar code).
    fn lanes(isa: Isa) -> Option<usize> {
        match isa.0 {
            Kind::Scalar => None,
            Kind::Avx2 => Some(8),
            Kind::Avx512 | Kind::Avx512Vnni => Some(16),
        }
    }

    /// Rows of the inner kernel's step on `isa`: [`matmul`]'s tasks on this
    /// path are multiples of it.
    fn rows(isa: Isa) -> usize {
        match isa.0 {
            Kind::Scalar | Kind::Avx2 => avx2::LANE_ROWS,
            Kind::Avx512 | Kind::Avx512Vnni => avx512::LANE_ROWS,
        }
    }

    /// Rows decoded at once on this path, a multiple of [`TokenLanes::rows`]:
    /// every token passes each tile once, so a tile of ~96 KiB (in L2) keeps
    /// that traffic small for thousands of tokens, where a step's rows at a
    /// time would read all of `x` again for every step.
    fn tile_rows(isa: Isa, cols: usize) -> usize {
        (LANES_TILE_BYTES / (cols * 4))
            .max(1)
            .next_multiple_of(TokenLanes::rows(isa))
    }

    /// Whether `matmul` takes this path: with vectors, and for enough
    /// tokens to fill a group (fewer would multiply mostly padding).
    fn wanted(isa: Isa, n_tokens: usize) -> bool {
        TokenLanes::lanes(isa).is_some_and(|lanes| n_tokens >= lanes)
    }

    fn new(isa: Isa, x: &[f32], cols: usize, n_tokens: usize) -> TokenLanes {
        let lanes = TokenLanes::lanes(isa).expect("TokenLanes::wanted said yes");
        let mut data = vec![0.0f32; n_tokens.div_ceil(lanes) * cols * lanes];
        // Written in order, read from `lanes` rows at once: token by token,
        // each write lands on another line, and a prompt's lanes (MiniLM's
        // 4096 tokens: 6 MB) leave the caches before their lines fill.
        for (group, x) in data
            .chunks_exact_mut(cols * lanes)
            .zip(x.chunks(cols * lanes))
        {
            let tokens: Vec<&[f32]> = x.chunks_exact(cols).collect();
            for (k, out) in group.chunks_exact_mut(lanes).enumerate() {
                for (out, token) in out.iter_mut().zip(&tokens) {
                    *out = token[k];
                }
            }
        }
        TokenLanes {
            data,
            cols,
            n_tokens,
            lanes,
        }
    }
}

/// [`dot_tile`] with the tokens in [`TokenLanes`].
fn dot_tile_lanes(isa: Isa, tile: &Tile, x: &TokenLanes, out: &mut [f32], stride: usize) {
    match isa.0 {
        Kind::Scalar => unreachable!("TokenLanes::wanted is false for scalar code"),
        Kind::Avx2 => avx2::dot_tile_lanes(tile, x, out, stride),
        Kind::Avx512 | Kind::Avx512Vnni => avx512::dot_tile_lanes(tile, x, out, stride),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_picks_the_fastest_set_up_to_it() {
        let available = Isa::available();
        assert_eq!(Isa::best_within(None), *available.last().unwrap());
        for name in ["scalar", "avx2", "avx512", "avx512-vnni"] {
            let cap = Isa::from_name(name).unwrap();
            assert_eq!(cap.name(), name);
            let best = Isa::best_within(Some(cap));
            assert!(best.0 <= cap.0 && available.contains(&best), "{name}");
            // Nothing faster than it and within the cap runs here.
            assert!(!available.iter().any(|i| i.0 > best.0 && i.0 <= cap.0));
        }
        assert_eq!(Isa::from_name("sse2"), None);
    }
}
