//! Executables: [`Compiled`], typed by the model, inputs and outputs it was
//! traced from, over [`Executable`], which takes and returns buffers by
//! position.

use std::marker::PhantomData;

use radix_pjrt::{ExecuteOptions, LoadedExecutable};

use crate::cache::{CacheKey, Origin};
use crate::module::{Bufferized, Module};
use crate::program::{ArgSpec, Program, TakenWeights};
use crate::{Buffer, Error, Platform, Result, Shape};

/// A program compiled from `forward(&M, I) -> O` (see [`crate::compile`]):
/// called with the model's buffers and the inputs as the same structs, it
/// returns the outputs as the same struct, with [`Buffer`] leaves.
///
/// ```no_run
/// # fn main() -> radix::Result<()> {
/// use radix::{Buffer, DType, Module, Platform, Shape, Tensor};
///
/// #[derive(Module, Clone)]
/// struct Scale {
///     w: Tensor,
/// }
///
/// let platform = Platform::cpu()?;
/// let shape = Shape::tagged(DType::F32, &[("d", 3)]);
/// let model = Scale { w: Tensor::param(shape) };
/// let exe = radix::compile(&platform, &model, &Tensor::param(shape), |m, x| (x * m.w, x + m.w))?;
/// // `Scale`'s twin with buffer leaves, `radix::Bufferized<Scale>`.
/// let weights = ScaleWith { w: Buffer::from_slice(&platform, &[1f32, 2., 3.], shape)? };
/// let x = Buffer::from_slice(&platform, &[4f32, 5., 6.], shape)?;
/// let (product, sum) = exe.call(&weights, x)?;
/// assert_eq!(product.to_vec::<f32>()?, [4., 10., 18.]);
/// # Ok(())
/// # }
/// ```
pub struct Compiled<M: Module, I: Module, O: Module> {
    exe: Executable,
    /// The traced outputs: the tree the results are put back into.
    outputs: O,
    /// Which of the model's buffers the program takes.
    weights: TakenWeights,
    types: PhantomData<fn(&M, I)>,
}

impl<M: Module, I: Module, O: Module> Compiled<M, I, O> {
    pub(crate) fn new(exe: Executable, outputs: O, weights: TakenWeights) -> Self {
        Compiled {
            exe,
            outputs,
            weights,
            types: PhantomData,
        }
    }

    /// Runs on the model's buffers and `inputs`; returns the outputs. Of
    /// the model's buffers it passes those the program reads. The weights
    /// are never donated; inputs the program donates
    /// ([`Program::aliases`]) are spent after the call (their memory holds
    /// a result), which is why inputs are moved in.
    pub fn call(&self, model: &Bufferized<M>, inputs: Bufferized<I>) -> Result<Bufferized<O>> {
        let TakenWeights { of_model, taken } = &self.weights;
        let mut args: Vec<&Buffer> = Vec::with_capacity(self.exe.program.args().len());
        // `taken` is in the model's order: one walk picks them.
        let (mut leaf, mut next) = (0, taken.iter().peekable());
        M::visit_leaves(model, &mut String::new(), &mut |_, b| {
            if next.next_if_eq(&&leaf).is_some() {
                args.push(b);
            }
            leaf += 1;
        });
        if leaf != *of_model {
            return Err(Error::ArgumentCount {
                what: "weights",
                expected: *of_model,
                got: leaf,
            });
        }
        I::visit_leaves(&inputs, &mut String::new(), &mut |_, b| args.push(b));
        let mut results = self.exe.call(&args)?.into_iter();
        drop(args);
        drop(inputs);
        self.outputs.map(&mut String::new(), &mut |path, _| {
            results
                .next()
                .ok_or_else(|| Error::Host(format!("the executable returned no buffer for {path}")))
        })
    }

    /// The executable underneath, which takes buffers by position.
    pub fn executable(&self) -> &Executable {
        &self.exe
    }

    /// The traced program (arguments, results, StableHLO text).
    pub fn program(&self) -> &Program {
        &self.exe.program
    }

    /// The executable cache key (also in dump file names).
    pub fn key(&self) -> CacheKey {
        self.exe.key
    }

    /// Whether it was compiled now or loaded from the executable cache.
    pub fn origin(&self) -> Origin {
        self.exe.origin
    }
}

impl<I: Module, O: Module> Compiled<(), I, O> {
    /// Runs a function compiled without a model ([`crate::compile_fn`]).
    pub fn call_fn(&self, inputs: Bufferized<I>) -> Result<Bufferized<O>> {
        // A function has no weights: its model is the unit struct.
        let no_weights = ();
        self.call(&no_weights, inputs)
    }
}

/// A compiled program that takes and returns buffers by position: the
/// model's weights it reads, then the inputs, in ABI order
/// ([`Program::args`]).
/// [`Compiled`] calls it with structs instead.
pub struct Executable {
    platform: Platform,
    exe: LoadedExecutable,
    program: Program,
    options: ExecuteOptions,
    key: CacheKey,
    origin: Origin,
}

impl Executable {
    pub(crate) fn new(
        platform: Platform,
        exe: LoadedExecutable,
        program: Program,
        key: CacheKey,
        origin: Origin,
    ) -> Executable {
        // The model's weights are shared by every call: never donated
        // (where the program aliases one, the plugin copies it instead).
        let options = ExecuteOptions {
            non_donatable_input_indices: (0..program.n_weights() as i64).collect(),
        };
        Executable {
            platform,
            exe,
            program,
            options,
            key,
            origin,
        }
    }

    /// The executable cache key (also in dump file names).
    pub fn key(&self) -> CacheKey {
        self.key
    }

    /// Whether it was compiled now or loaded from the executable cache.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The traced program (arguments, results, StableHLO text).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The platform it runs on.
    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    /// Runs on `args`: the model's weights, then the inputs, in ABI order;
    /// returns the results in the output's visit order, with their tags.
    /// Inputs the program donates ([`Program::aliases`]) are spent: using
    /// one again is [`Error::Donated`].
    pub fn call(&self, args: &[&Buffer]) -> Result<Vec<Buffer>> {
        let n = self.n_partitions();
        check_args("arguments", self.program.args(), 0, args.iter().copied(), n)?;
        let per_device: Vec<Vec<&radix_pjrt::Buffer>> = (0..n)
            .map(|d| args.iter().map(|b| &b.shards()[d]).collect())
            .collect();
        let out = self.exe.execute(&per_device, &self.options)?;
        // Per device, per result -> per result, per device.
        let mut shards: Vec<Vec<radix_pjrt::Buffer>> =
            self.program.results().iter().map(|_| vec![]).collect();
        for device_out in out {
            for (j, b) in device_out.into_iter().enumerate() {
                if let Some(s) = shards.get_mut(j) {
                    s.push(b);
                }
            }
        }
        let mesh = self.program.mesh();
        Ok(shards
            .into_iter()
            .zip(self.program.results())
            .map(|(s, spec)| Buffer::from_shards(s, spec.shape, mesh.cloned()))
            .collect())
    }

    /// The number of SPMD partitions (devices) it runs on.
    pub fn n_partitions(&self) -> usize {
        self.program.mesh().map_or(1, |m| m.n_devices())
    }
}

fn check_args<'b>(
    what: &'static str,
    specs: &[ArgSpec],
    first: usize,
    given: impl ExactSizeIterator<Item = &'b Buffer>,
    n_partitions: usize,
) -> Result<()> {
    if given.len() != specs.len() {
        return Err(Error::ArgumentCount {
            what,
            expected: specs.len(),
            got: given.len(),
        });
    }
    for (k, (spec, b)) in specs.iter().zip(given).enumerate() {
        if b.raw().is_deleted()? {
            return Err(Error::Donated {
                index: first + k,
                path: spec.path.clone(),
            });
        }
        let (want, got) = (spec.shape, b.shape());
        if want.dims() != got.dims() || want.dtype() != got.dtype() {
            return Err(Error::Argument {
                index: first + k,
                path: spec.path.clone(),
                expected: want.to_string(),
                got: got.to_string(),
            });
        }
        let split = |s: Shape| {
            if n_partitions > 1 {
                s.mesh_axes()
            } else {
                vec![]
            }
        };
        if b.shards().len() != n_partitions || split(want) != split(got) {
            return Err(Error::Sharding(format!(
                "argument {} ({}): expected {want} on {n_partitions} devices, got {got} on {} devices",
                first + k,
                spec.path,
                b.shards().len()
            )));
        }
    }
    Ok(())
}
