//! `Executable`: a compiled program, its bound weights, and `call`.

use radix_pjrt::{ExecuteOptions, LoadedExecutable};

use crate::cache::{CacheKey, Origin};
use crate::compile::{ArgSpec, Program};
use crate::{Buffer, Error, Platform, Result};

/// A compiled program. Bind the model's weights once with
/// [`Executable::bind`], then [`Executable::call`] it with input buffers.
pub struct Executable {
    platform: Platform,
    exe: LoadedExecutable,
    program: Program,
    weights: Vec<Buffer>,
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
        Executable {
            platform,
            exe,
            program,
            weights: vec![],
            options: ExecuteOptions::default(),
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

    /// Binds the model's weights (in ABI order; see [`Program::args`]),
    /// replacing any bound before. Weights are never donated: where the
    /// program aliases one, the plugin copies it instead.
    pub fn bind(&mut self, weights: Vec<Buffer>) -> Result<()> {
        let specs = &self.program.args()[..self.program.n_weights()];
        check_args("weights", specs, 0, weights.iter())?;
        self.options.non_donatable_input_indices = (0..weights.len() as i64).collect();
        self.weights = weights;
        Ok(())
    }

    /// Runs on `inputs` (in the inputs' visit order) with the bound weights;
    /// returns the results in the output's visit order, with their tags.
    /// Inputs the program donates ([`Program::aliases`]) are consumed: using
    /// one again is [`Error::Donated`].
    pub fn call(&self, inputs: &[&Buffer]) -> Result<Vec<Buffer>> {
        let n_w = self.program.n_weights();
        if self.weights.len() != n_w {
            return Err(Error::ArgumentCount {
                what: "bound weights",
                expected: n_w,
                got: self.weights.len(),
            });
        }
        check_args(
            "inputs",
            &self.program.args()[n_w..],
            n_w,
            inputs.iter().copied(),
        )?;
        let mut args: Vec<&radix_pjrt::Buffer> = Vec::with_capacity(n_w + inputs.len());
        args.extend(self.weights.iter().map(Buffer::raw));
        args.extend(inputs.iter().map(|b| b.raw()));
        let mut out = self.exe.execute(&[args], &self.options)?;
        let out = out.pop().unwrap_or_default();
        Ok(out
            .into_iter()
            .zip(self.program.results())
            .map(|(raw, spec)| Buffer::from_raw(raw, spec.shape))
            .collect())
    }
}

fn check_args<'b>(
    what: &'static str,
    specs: &[ArgSpec],
    first: usize,
    given: impl ExactSizeIterator<Item = &'b Buffer>,
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
    }
    Ok(())
}
