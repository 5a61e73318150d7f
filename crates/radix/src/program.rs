//! A traced program: its IR, its arguments (weights, then inputs) and
//! results, donation and partitioning. [`crate::trace`] makes one as traced;
//! [`Program::optimize`] runs the passes, which compiling does too.

use crate::donation;
use crate::error::Error;
use crate::ir::ops::Control;
use crate::ir::{Function, Op, interp, print};
use crate::literal::Literal;
use crate::passes;
use crate::sharding::{Mesh, Partitioner};
use crate::{Result, Shape};

/// One argument or result of a program: its path in the model or input tree
/// (inputs under `input`, results under `output`) and its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgSpec {
    /// The dotted path, e.g. `layers.0.weight` or `input.1`.
    pub path: String,
    /// The shape, with tags.
    pub shape: Shape,
}

/// Which of a model's tensors (its leaves in visit order) a program takes
/// as its weights, in order, and how many the model has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TakenWeights {
    pub(crate) of_model: usize,
    pub(crate) taken: Vec<usize>,
}

/// A traced function: the IR, its arguments (weights, then inputs) and results.
///
/// As [`crate::trace`] returns it, the IR is as traced; [`Program::optimize`]
/// (run by every compile) canonicalizes it, merges equal nodes and drops dead
/// ones, so that equal programs print and hash the same.
#[derive(Debug, Clone)]
pub struct Program {
    function: Function,
    args: Vec<ArgSpec>,
    n_weights: usize,
    results: Vec<ArgSpec>,
    /// Per argument, the output `reuse_buffer` named for it, read off the
    /// function as traced (the passes may merge results).
    reused: Vec<Option<usize>>,
    /// Per argument, the output it aliases (donation).
    aliases: Vec<Option<usize>>,
    /// The mesh it is partitioned over (see [`Program::with_mesh`]).
    mesh: Option<Mesh>,
    /// Whose sharding attributes its text carries.
    partitioner: Partitioner,
    /// Whether the passes have run.
    optimized: bool,
}

impl Program {
    /// The program of a traced `function` whose first `n_weights` arguments
    /// are model weights, not yet optimized.
    pub(crate) fn new(
        function: Function,
        args: Vec<ArgSpec>,
        n_weights: usize,
        results: Vec<ArgSpec>,
    ) -> Program {
        let reused = donation::reused(&function);
        let aliases = donation::aliases(&function, reused.clone(), n_weights);
        Program {
            function,
            args,
            n_weights,
            results,
            reused,
            aliases,
            mesh: None,
            partitioner: Partitioner::default(),
            optimized: false,
        }
    }

    /// This program after the passes (canonicalize, CSE, DCE): what compiling
    /// it compiles. Inputs returned unchanged by the optimized function become
    /// donated (see [`Program::aliases`]). Optimizing twice changes nothing.
    pub fn optimize(mut self) -> Program {
        if self.optimized {
            return self;
        }
        self.function = passes::optimize(&self.function);
        self.aliases = donation::aliases(&self.function, self.reused.clone(), self.n_weights);
        self.optimized = true;
        self
    }

    /// Checks the IR: every node's type is what its op's shape rule gives
    /// from its operands' types, every operand comes before its user, and
    /// so on in each nested body. An [`Error::Verify`] names the first node
    /// that is not. Tracing, the passes and differentiation keep a program
    /// valid; debug builds check it after each of them.
    ///
    /// ```
    /// # use radix::{DType, Shape, Tensor};
    /// let x = Tensor::param(Shape::tagged(DType::F32, &[("n", 3)]));
    /// let program = radix::trace_fn(&x, |x: Tensor| x.exp() + 1.0).unwrap();
    /// program.verify().unwrap();
    /// program.optimize().verify().unwrap();
    /// ```
    pub fn verify(&self) -> Result<()> {
        self.function
            .verify()
            .map_err(|e| Error::Verify(e.to_string()))
    }

    /// Whether the passes have run ([`Program::optimize`]).
    pub fn is_optimized(&self) -> bool {
        self.optimized
    }

    /// The IR.
    pub(crate) fn function(&self) -> &Function {
        &self.function
    }

    /// This program with `function` (same arguments and results) in place
    /// of its IR: custom calls replaced by their fallbacks.
    pub(crate) fn with_function(mut self, function: Function) -> Program {
        self.function = function;
        self
    }

    /// The StableHLO module text (deterministic), with source locations.
    pub fn stablehlo(&self) -> String {
        print::print_module_signed(&self.function, print::Locations::Include, &self.signature())
    }

    /// The StableHLO module text without source locations: what the
    /// executable cache key hashes, so that moving code keeps the key.
    pub fn stablehlo_without_locations(&self) -> String {
        print::print_module_signed(&self.function, print::Locations::Omit, &self.signature())
    }

    /// Per argument, the index of the output that may live in its buffer
    /// (see [`crate::Tensor::reuse_buffer`]); such an input is consumed by a call.
    pub fn aliases(&self) -> &[Option<usize>] {
        &self.aliases
    }

    /// This program, optimized, partitioned over `mesh`: its text gets a
    /// sharding (`sdy.sharding`, or GSPMD's `mhlo.sharding`: see
    /// [`Program::with_partitioner`]) and `mhlo.layout_mode` on every
    /// argument and result (from their shapes' sharding, see
    /// [`Shape::shard`]), the module gets the mesh (Shardy's `sdy.mesh`),
    /// `mhlo.num_partitions` and `mhlo.num_replicas`, and sharding
    /// constraints ([`crate::Tensor::shard`]) name the mesh's devices. An
    /// [`Error::Sharding`] names the first argument, result or constraint
    /// whose sharding does not fit the mesh (a split axis that does not
    /// divide, a mesh axis it lacks). [`crate::compile_program_with`] applies the
    /// platform's mesh itself.
    pub fn with_mesh(self, mesh: Mesh) -> Result<Program> {
        self.optimize().partition(mesh)
    }

    fn partition(mut self, mesh: Mesh) -> Result<Program> {
        let fits = |what: &str, shape: &Shape| {
            mesh.sharding_of(shape)
                .map_err(|e| Error::Sharding(format!("{what}: {e}")))
        };
        for (i, a) in self.args.iter().enumerate() {
            fits(&format!("argument {i} ({})", a.path), &a.shape)?;
        }
        for (i, r) in self.results.iter().enumerate() {
            fits(&format!("result {i} ({})", r.path), &r.shape)?;
        }
        let f = &self.function;
        for (n, l) in f.nodes.iter().zip(&f.locs) {
            if n.op == crate::ir::Op::Sharding {
                fits(
                    &format!("the constraint at {}:{}", l.file(), l.line()),
                    &n.shape,
                )?;
            }
        }
        self.mesh = (mesh.n_devices() > 1).then_some(mesh);
        Ok(self)
    }

    /// The same program with its shardings printed for `partitioner`
    /// (Shardy by default; [`crate::CompileConfig::partitioner`]).
    pub fn with_partitioner(self, partitioner: Partitioner) -> Program {
        Program {
            partitioner,
            ..self
        }
    }

    /// The partitioner its shardings are printed for.
    pub fn partitioner(&self) -> Partitioner {
        self.partitioner
    }

    /// The mesh the program is partitioned over, if any.
    pub fn mesh(&self) -> Option<&Mesh> {
        self.mesh.as_ref()
    }

    fn signature(&self) -> print::Signature {
        let mut arg_attrs: Vec<String> = self
            .aliases
            .iter()
            .map(|a| a.map_or(String::new(), |i| format!("tf.aliasing_output = {i} : i32")))
            .collect();
        let Some(mesh) = &self.mesh else {
            return print::Signature {
                arg_attrs,
                ..print::Signature::default()
            };
        };
        // `with_mesh` checked that every sharding fits.
        let attrs = |shape: &Shape| match self.partitioner {
            Partitioner::Shardy => {
                let s = mesh.sdy_sharding_of(shape).unwrap_or_else(|e| e);
                format!("sdy.sharding = {s}, mhlo.layout_mode = \"default\"")
            }
            Partitioner::Gspmd => {
                let s = mesh.sharding_of(shape).unwrap_or_else(|e| e);
                format!("mhlo.sharding = \"{s}\", mhlo.layout_mode = \"default\"")
            }
        };
        for (a, spec) in arg_attrs.iter_mut().zip(&self.args) {
            *a = if a.is_empty() {
                attrs(&spec.shape)
            } else {
                format!("{a}, {}", attrs(&spec.shape))
            };
        }
        print::Signature {
            arg_attrs,
            result_attrs: self.results.iter().map(|r| attrs(&r.shape)).collect(),
            module_attrs: format!(
                "mhlo.num_partitions = {} : i32, mhlo.num_replicas = 1 : i32",
                mesh.n_devices()
            ),
            mesh: Some(mesh.clone()),
            partitioner: self.partitioner,
        }
    }

    /// The arguments in ABI order: the model's tensors the program reads
    /// (in the model's visit order; [`crate::trace`] leaves out the
    /// others), then the inputs'.
    pub fn args(&self) -> &[ArgSpec] {
        &self.args
    }

    /// How many leading arguments are model weights (the model's tensors
    /// the program reads).
    pub fn n_weights(&self) -> usize {
        self.n_weights
    }

    /// The results in order.
    pub fn results(&self) -> &[ArgSpec] {
        &self.results
    }

    /// The bytes the `stablehlo.while` loops of the program carry from one
    /// iteration to the next, summed over every loop (in called functions
    /// once per call). A loop's derivative keeps the rows it saves for the
    /// backward pass in its state, so this is the memory those rows take:
    /// what `for_`'s gradient keeps grows with it.
    pub fn loop_state_bytes(&self) -> usize {
        fn walk(f: &Function) -> usize {
            f.nodes
                .iter()
                .map(|n| {
                    let own = match &n.op {
                        Op::Control(Control::While { body, .. }) => body
                            .results
                            .iter()
                            .map(|&r| body.node(r).shape.byte_size())
                            .sum(),
                        _ => 0,
                    };
                    own + n.op.bodies().into_iter().map(walk).sum::<usize>()
                })
                .sum()
        }
        walk(&self.function)
    }

    /// Runs the reference interpreter on `args` (one literal per argument).
    pub fn interpret(&self, args: &[Literal]) -> Vec<Literal> {
        let res = interp::eval(&self.function, args);
        // Tag-only ops (`rename`) change the handle, not the node: use the result specs.
        res.into_iter()
            .zip(&self.results)
            .map(|(l, spec)| Literal::new(spec.shape, l.data().to_vec()))
            .collect()
    }
}
