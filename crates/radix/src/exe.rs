//! `Executable`: a compiled program, its bound weights, and `call`.

use radix_pjrt::{ExecuteOptions, LoadedExecutable};

use crate::cache::{CacheKey, Origin};
use crate::program::{ArgSpec, Program};
use crate::{Buffer, Error, Platform, Result, Shape};

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
        check_args("weights", specs, 0, weights.iter(), self.n_partitions())?;
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
        let n = self.n_partitions();
        check_args(
            "inputs",
            &self.program.args()[n_w..],
            n_w,
            inputs.iter().copied(),
            n,
        )?;
        let args: Vec<Vec<&radix_pjrt::Buffer>> = (0..n)
            .map(|d| {
                let weights = self.weights.iter().map(|b| &b.shards()[d]);
                weights
                    .chain(inputs.iter().map(|b| &b.shards()[d]))
                    .collect()
            })
            .collect();
        let out = self.exe.execute(&args, &self.options)?;
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
