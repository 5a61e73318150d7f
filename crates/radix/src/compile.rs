//! Tracing a model's `forward` into a [`Program`] and compiling it into an
//! [`Executable`]: the compile step runs the passes ([`Program::optimize`]),
//! the tracer does not.

use crate::cache::{self, CacheKey, ExecutableCache, Origin};
use crate::compile_config::{CacheMode, CompileConfig};
use crate::custom_call;
use crate::error::Error;
use crate::exe::{Compiled, Executable};
use crate::module::{Module, with_field};
use crate::program::{ArgSpec, Program, TakenWeights};
use crate::sharding::Mesh;
use crate::tensor::{check_result, parameter, with_trace};
use crate::{Platform, Result, Tensor};

/// Traces `forward(model, inputs)`: every tensor of `inputs`, and every
/// tensor of `model` that `forward` reads (made with [`Tensor::param`]),
/// becomes an argument, in their visit order ([`Program::args`] names
/// each by its path). A model tensor `forward` does not read is left out,
/// as JAX's `jit` leaves out unused arguments: a step that reads the
/// embedding alone takes one weight, not the model's 272. The first misuse
/// of an op while tracing comes back as [`Error::Trace`].
///
/// The program is as traced: the passes run when it is compiled, or earlier
/// through [`Program::optimize`] (to read the text that will be compiled).
#[track_caller]
pub fn trace<M, I, O, F>(model: &M, inputs: &I, forward: F) -> Result<Program>
where
    M: Module + Clone,
    I: Module + Clone,
    O: Module,
    F: FnOnce(&M, I) -> O,
{
    Ok(trace_outputs(model, inputs, forward)?.program)
}

/// Traces a function of `inputs` alone, with no model (see [`trace`]): every
/// tensor of `inputs` becomes an argument, in their visit order.
///
/// ```
/// # fn main() -> radix::Result<()> {
/// use radix::{DType, Shape, Tensor};
/// let shape = Shape::tagged(DType::F32, &[("b", 2), ("d", 3)]);
/// let program = radix::trace_fn(&Tensor::param(shape), |x| (x * 2.0).sum("d"))?;
/// assert_eq!(program.args().len(), 1);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn trace_fn<I, O, F>(inputs: &I, f: F) -> Result<Program>
where
    I: Module + Clone,
    O: Module,
    F: FnOnce(I) -> O,
{
    trace(&NO_MODEL, inputs, |_, x| f(x))
}

/// The model of a function traced without one: it has no tensors, so the
/// program has no weights.
const NO_MODEL: () = ();

/// What [`trace_outputs`] gives: the program, the traced outputs (the tree
/// a call's results are put back into) and which of the model's tensors
/// the program takes.
pub(crate) struct Traced<O> {
    pub(crate) program: Program,
    pub(crate) outputs: O,
    pub(crate) weights: TakenWeights,
}

/// [`trace`], also returning the traced outputs and the weights taken.
#[track_caller]
pub(crate) fn trace_outputs<M, I, O, F>(model: &M, inputs: &I, forward: F) -> Result<Traced<O>>
where
    M: Module + Clone,
    I: Module + Clone,
    O: Module,
    F: FnOnce(&M, I) -> O,
{
    let loc = std::panic::Location::caller();
    let mut args = vec![];
    let ((n_weights, results, out), mut function, error) = with_trace(|| {
        let mut bind = |path: &str, t: &mut Tensor| {
            *t = parameter(args.len(), t.shape(), loc);
            args.push(ArgSpec {
                path: path.to_string(),
                shape: t.shape(),
            });
        };
        let mut model = model.clone();
        let mut n_weights = 0;
        model.visit_mut(&mut String::new(), &mut |p, t| {
            bind(p, t);
            n_weights += 1;
        });
        let mut inputs = inputs.clone();
        with_field(&mut String::new(), "input", |p| {
            inputs.visit_mut(p, &mut bind)
        });
        let out = forward(&model, inputs);
        let mut results = vec![];
        with_field(&mut String::new(), "output", |p| {
            out.visit(p, &mut |path, t| {
                results.push((
                    ArgSpec {
                        path: path.to_string(),
                        shape: t.shape(),
                    },
                    check_result(*t),
                ))
            })
        });
        (n_weights, results, out)
    });
    if let Some(e) = error {
        return Err(Error::Trace(e));
    }
    function.results = results.iter().map(|r| r.1).collect();
    crate::ir::verify::debug_check(&function, "tracing");
    let results = results.into_iter().map(|r| r.0).collect();
    let (function, taken) = crate::ir::passes::params::without_unread(&function, n_weights);
    let inputs = args.split_off(n_weights);
    let args = (taken.iter().map(|&k| args[k].clone()))
        .chain(inputs)
        .collect();
    let program = Program::new(function, args, taken.len(), results);
    let weights = TakenWeights {
        of_model: n_weights,
        taken,
    };
    Ok(Traced {
        program,
        outputs: out,
        weights,
    })
}

/// Traces `forward(model, inputs)` (see [`trace`]) and compiles it for
/// `platform`: a [`Compiled`] called with the model's buffers and the
/// inputs as the same structs ([`crate::Bufferized`]).
///
/// ```no_run
/// # fn main() -> radix::Result<()> {
/// use radix::{Buffer, DType, Module, Platform, Shape, Tensor};
///
/// #[derive(Module, Clone)]
/// struct Bias {
///     b: Tensor,
/// }
///
/// let platform = Platform::cpu()?;
/// let shape = Shape::tagged(DType::F32, &[("d", 3)]);
/// let model = Bias { b: Tensor::param(shape) };
/// let exe = radix::compile(&platform, &model, &Tensor::param(shape), |m, x| x + m.b)?;
/// let weights = BiasWith { b: Buffer::from_slice(&platform, &[1f32, 1., 1.], shape)? };
/// let x = Buffer::from_slice(&platform, &[1f32, 2., 3.], shape)?;
/// assert_eq!(exe.call(&weights, x)?.to_vec::<f32>()?, [2., 3., 4.]);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn compile<M, I, O, F>(
    platform: &Platform,
    model: &M,
    inputs: &I,
    forward: F,
) -> Result<Compiled<M, I, O>>
where
    M: Module + Clone,
    I: Module + Clone,
    O: Module,
    F: FnOnce(&M, I) -> O,
{
    let Traced {
        program,
        outputs,
        weights,
    } = trace_outputs(model, inputs, forward)?;
    Ok(Compiled::new(
        compile_program(platform, program)?,
        outputs,
        weights,
    ))
}

/// Traces and compiles a function of `inputs` alone, with no model: a
/// [`Compiled`] called with [`Compiled::call_fn`].
///
/// ```no_run
/// # fn main() -> radix::Result<()> {
/// use radix::{Buffer, DType, Platform, Shape, Tensor};
/// let platform = Platform::cpu()?;
/// let shape = Shape::tagged(DType::F32, &[("b", 2), ("d", 3)]);
/// let exe = radix::compile_fn(&platform, &Tensor::param(shape), |x| (x * 2.0).sum("d"))?;
/// let x = Buffer::from_slice(&platform, &[1f32, 2., 3., 4., 5., 6.], shape)?;
/// assert_eq!(exe.call_fn(x)?.to_vec::<f32>()?, [12., 30.]);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn compile_fn<I, O, F>(platform: &Platform, inputs: &I, f: F) -> Result<Compiled<(), I, O>>
where
    I: Module + Clone,
    O: Module,
    F: FnOnce(I) -> O,
{
    compile(platform, &NO_MODEL, inputs, |_, x| f(x))
}

/// Compiles a traced program for `platform` with [`CompileConfig::new`]
/// (the platform's defaults, the executable cache, `RADIX_DUMP_DIR`).
pub fn compile_program(platform: &Platform, program: Program) -> Result<Executable> {
    compile_program_with(platform, program, &CompileConfig::new(platform))
}

/// The executable cache key of `program` compiled for `platform` with
/// `config` (see [`crate::cache`]): the key of the optimized program, so a
/// program as traced and the same program optimized have one key. Dump
/// flags are left out: they do not change the executable. Custom calls
/// count as compiled: their fallbacks where `config` or the platform calls
/// for them, else each used call's name and implementation version.
pub fn cache_key(
    platform: &Platform,
    program: &Program,
    config: &CompileConfig,
) -> Result<CacheKey> {
    let options = config.partitioned_options().to_bytes()?;
    let optimized;
    let program = if program.is_optimized() {
        program
    } else {
        optimized = program.clone().optimize();
        &optimized
    };
    let lowered = custom_call::lower(platform, program.function(), config.custom_calls)?;
    let program = &match lowered {
        Some(function) => program.clone().with_function(function),
        None => program.clone(),
    };
    let mut text = program.stablehlo_without_locations();
    // A kernel is code the executable depends on.
    text.push_str(&custom_call::key_text(program.function()));
    let mut kinds: Vec<&str> = platform.devices().iter().map(|d| d.kind()).collect();
    kinds.dedup();
    CacheKey::new(&text, &options, platform.client().plugin(), &kinds)
}

/// Compiles a traced program for `platform` as `config` says: the passes
/// run first ([`Program::optimize`]; a no-op on an optimized program), then a cache hit
/// loads the stored executable; a miss, or an entry that fails to load
/// (logged as a warning, never an error), compiles and stores it. With a
/// dump configured the program is always compiled, so XLA writes its dumps,
/// and not stored (it would dump again wherever it is loaded).
/// On a platform with a mesh the program is partitioned over it (see
/// [`Program::with_mesh`]; a program made for another mesh is an error);
/// without one, shardings are ignored.
pub fn compile_program_with(
    platform: &Platform,
    program: Program,
    config: &CompileConfig,
) -> Result<Executable> {
    let program = program.optimize().with_partitioner(config.partitioner);
    let program = match (platform.mesh(), program.mesh()) {
        (Some(m), None) => program.with_mesh(m.clone())?,
        (p, m) if p != m => {
            return Err(Error::Sharding(format!(
                "the program is partitioned over {:?}, the platform over {:?}",
                m.map(Mesh::dims),
                p.map(Mesh::dims)
            )));
        }
        _ => program,
    };
    let program = match custom_call::lower(platform, program.function(), config.custom_calls)? {
        Some(function) => program.with_function(function),
        None => program,
    };
    crate::collective::check_partitions(&program)?;
    crate::shard_map::check(&program)?;
    custom_call::register(platform, program.function())?;
    let key = cache_key(platform, &program, config)?;
    let text = program.stablehlo();
    if let Some(dump) = &config.dump
        && let Err(e) = dump.write_module(&config.name, key, &text)
    {
        tracing::warn!(
            "cannot write the module dump to {}: {e}",
            dump.dir.display()
        );
    }
    let cache = match &config.cache {
        CacheMode::Dir(dir) => Some(ExecutableCache::new(dir)),
        CacheMode::Disabled => None,
    };
    let client = platform.client();
    if let (Some(cache), None) = (&cache, &config.dump)
        && let Some(exe) = cache::load(cache, key, client, &program)
    {
        return Ok(Executable::new(
            platform.clone(),
            exe,
            program,
            key,
            Origin::Cache,
        ));
    }
    let exe = client.compile(&text, &config.compile_options())?;
    // An executable compiled for a dump carries XLA's dump options (it
    // dumps and logs again wherever it is loaded), and the key leaves them
    // out: it is not stored.
    if let (Some(cache), None) = (&cache, &config.dump) {
        cache::store(cache, key, &exe);
    }
    Ok(Executable::new(
        platform.clone(),
        exe,
        program,
        key,
        Origin::Compiled,
    ))
}
