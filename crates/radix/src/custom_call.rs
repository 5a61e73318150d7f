//! Custom calls: kernels written in Rust that run inside compiled programs.
//!
//! A [`CustomCall`] is declared once, with a name, an implementation
//! version, a shape rule and a Rust kernel; optionally side effects,
//! operands whose buffer an output reuses, and a fallback written with
//! ordinary ops. [`CustomCall::call`] uses it in a traced function like any
//! op: it becomes `stablehlo.custom_call @name` with `api_version = 4` and
//! the call's [`Attrs`] as a typed `backend_config`.
//!
//! The kernel is the op's reference semantics *and* its CPU implementation:
//! the reference interpreter runs it on host literals, and before the first
//! compile that uses the call, radix registers it with the CPU plugin
//! through the PJRT FFI extension (once per process), so XLA runs it on the
//! buffers of the executable. On a platform without a Rust implementation
//! (no FFI extension, or not the CPU), or with [`CustomCallMode::Fallback`],
//! the call's fallback is compiled instead; without one, compiling is an
//! [`Error::CustomCall`] naming the call and the platform.
//!
//! ```no_run
//! # fn main() -> radix::Result<()> {
//! use radix::custom_call::{Attrs, CustomCall};
//! use radix::{DType, Platform, Shape, Tensor};
//! // y = x * k, elementwise, on f32.
//! let scale = CustomCall::builder(
//!     "example.scale",
//!     1,
//!     |shapes, _| Ok(vec![shapes[0]]),
//!     |k| {
//!         let factor = k.attrs().f32("k")?;
//!         let (x, y) = (k.input::<f32>(0)?, k.output::<f32>(0)?);
//!         for (y, x) in y.iter_mut().zip(x) {
//!             *y = x * factor;
//!         }
//!         Ok(())
//!     },
//! )
//! .fallback(|x, attrs| vec![x[0] * attrs.f32("k").unwrap_or(1.0) as f64])
//! .register()?;
//! let platform = Platform::cpu()?;
//! let x = Tensor::param(Shape::new(DType::F32, &[4]));
//! let exe = radix::compile_fn(&platform, &x, |x| {
//!     scale.call(&[x], &Attrs::new().with("k", 3.0f32))[0]
//! })?;
//! # Ok(())
//! # }
//! ```

use std::any::TypeId;
use std::cell::Cell;
use std::sync::{Arc, Mutex, OnceLock};

use radix_pjrt::custom_call::{
    CallFrame, Handler, NAME_ATTR, ThreadPool, parallel_for, register_handler,
};
use radix_pjrt::provision::Target;

pub use radix_io::attr::{AttrValue, Attrs};

use crate::ir::ops::custom_call::{HostKernel, Site};
use crate::ir::passes::layers;
use crate::ir::{Function, Op};
use crate::literal::Literal;
use crate::{DType, Element, Error, Platform, Result, Shape, Tensor};

/// The shape rule of a custom call: the result shapes for the operand
/// shapes and attributes, or why they do not fit.
pub type ShapeRule =
    dyn Fn(&[Shape], &Attrs) -> std::result::Result<Vec<Shape>, String> + Send + Sync;
/// A kernel: reads the inputs and attributes of a [`Kernel`], writes its
/// outputs, or says what went wrong.
pub type KernelFn = dyn Fn(&Kernel<'_>) -> std::result::Result<(), String> + Send + Sync;
/// A fallback: the same results computed with ordinary ops.
pub type FallbackFn = dyn Fn(&[Tensor], &Attrs) -> Vec<Tensor> + Send + Sync;
/// A derivative: from the operands, the results, one cotangent per result
/// and the attributes, one cotangent per operand, written with ordinary
/// ops (see [`CustomCallBuilder::derivative`]).
pub type DerivativeFn =
    dyn Fn(&[Tensor], &[Tensor], &[Tensor], &Attrs) -> Vec<Tensor> + Send + Sync;

/// Which implementation of custom calls a compile uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomCallMode {
    /// The Rust kernel where the platform runs it (the CPU plugin with the
    /// FFI extension), else the fallback, else an error.
    Native,
    /// Always the fallback (an error for a call without one): runs the
    /// fallback path on the CPU.
    Fallback,
}

/// A declared custom call. Cheap to clone (shared); keep it in a `static`
/// (`LazyLock`) or pass it around.
#[derive(Clone)]
pub struct CustomCall {
    inner: Arc<Decl>,
}

struct Decl {
    name: String,
    version: u32,
    shape_rule: Box<ShapeRule>,
    kernel: Box<KernelFn>,
    side_effect: bool,
    aliases: Vec<(usize, usize)>,
    fallback: Option<Box<FallbackFn>>,
    derivative: Option<Box<DerivativeFn>>,
    /// Whether a gradient through the call goes through its fallback
    /// ([`CustomCallBuilder::differentiate_fallback`]).
    differentiate_fallback: bool,
    /// What makes two declarations of one name the same.
    semantics: Semantics,
    /// The handler registered with plugins (one per declaration, so a
    /// second registration on another plugin is the same handler).
    handler: OnceLock<Arc<Handler>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Semantics {
    version: u32,
    side_effect: bool,
    aliases: Vec<(usize, usize)>,
    differentiate_fallback: bool,
    types: [TypeId; 4],
}

/// A custom call being declared; [`CustomCallBuilder::register`] ends it.
pub struct CustomCallBuilder {
    decl: Decl,
    types: [TypeId; 4],
}

/// Declarations so far, by name.
static DECLARED: Mutex<Vec<CustomCall>> = Mutex::new(Vec::new());

impl CustomCall {
    /// Starts declaring the custom call `name` (the `call_target_name`;
    /// letters, digits and `_ . $`) at implementation `version` (raise it
    /// whenever the kernel computes something else: executables cached
    /// with the old one are then not reused), with its shape rule and its
    /// kernel, which is both the reference semantics and the CPU
    /// implementation.
    pub fn builder<S, K>(name: &str, version: u32, shape_rule: S, kernel: K) -> CustomCallBuilder
    where
        S: Fn(&[Shape], &Attrs) -> std::result::Result<Vec<Shape>, String> + Send + Sync + 'static,
        K: Fn(&Kernel<'_>) -> std::result::Result<(), String> + Send + Sync + 'static,
    {
        CustomCallBuilder {
            types: [
                TypeId::of::<S>(),
                TypeId::of::<K>(),
                TypeId::of::<()>(),
                TypeId::of::<()>(),
            ],
            decl: Decl {
                name: name.to_string(),
                version,
                shape_rule: Box::new(shape_rule),
                kernel: Box::new(kernel),
                side_effect: false,
                aliases: vec![],
                fallback: None,
                derivative: None,
                differentiate_fallback: false,
                semantics: Semantics {
                    version,
                    side_effect: false,
                    aliases: vec![],
                    differentiate_fallback: false,
                    types: [TypeId::of::<()>(); 4],
                },
                handler: OnceLock::new(),
            },
        }
    }

    /// The name (`call_target_name`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The implementation version.
    pub fn version(&self) -> u32 {
        self.inner.version
    }

    /// Whether the call has side effects.
    pub fn has_side_effect(&self) -> bool {
        self.inner.side_effect
    }

    /// `(output, operand)` pairs: outputs written in their operand's buffer.
    pub fn aliases(&self) -> &[(usize, usize)] {
        &self.inner.aliases
    }

    /// Applies the call to `operands` with `attrs` in the traced function
    /// (`stablehlo.custom_call`); one tensor per result of the shape rule.
    /// A shape rule's `Err`, bad attributes, an alias whose output and
    /// operand differ in shape, or a fallback whose results differ from the
    /// shape rule's are trace errors at the caller's line.
    #[track_caller]
    pub fn call(&self, operands: &[Tensor], attrs: &Attrs) -> Vec<Tensor> {
        crate::tensor::custom_call::emit(self, operands, attrs)
    }

    pub(crate) fn same(&self, other: &CustomCall) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn shape_rule(&self) -> &ShapeRule {
        &*self.inner.shape_rule
    }

    pub(crate) fn fallback(&self) -> Option<&FallbackFn> {
        self.inner.fallback.as_deref()
    }

    pub(crate) fn derivative(&self) -> Option<&DerivativeFn> {
        self.inner.derivative.as_deref()
    }

    /// Whether a gradient through the call goes through its fallback.
    pub(crate) fn differentiates_fallback(&self) -> bool {
        self.inner.differentiate_fallback
    }

    /// Runs the kernel on host views (the interpreter and the handler).
    pub(crate) fn run(&self, kernel: &Kernel<'_>) -> std::result::Result<(), String> {
        (self.inner.kernel)(kernel)
    }

    /// The handler XLA runs: decodes the frame into a [`Kernel`].
    fn handler(&self) -> Arc<Handler> {
        self.inner
            .handler
            .get_or_init(|| {
                let call = self.clone();
                Arc::new(move |frame: &CallFrame<'_>| {
                    let (mut attrs, mut stacked) = (Attrs::new(), None);
                    for (name, v) in frame.attrs()? {
                        // The kernel sees neither radix's name for the
                        // call nor which operands are stacks.
                        if name == layers::LAYERS_ATTR {
                            stacked = Some(v);
                        } else if name != NAME_ATTR {
                            attrs = attrs.with(&name, v);
                        }
                    }
                    let view = |b: radix_pjrt::custom_call::FfiBuffer<'_>| {
                        let dtype = b
                            .dtype()
                            .and_then(|t| {
                                DType::ALL
                                    .into_iter()
                                    .find(|&d| crate::dtype::element_type(d) == t)
                            })
                            .ok_or("a buffer of an element type radix does not model")?;
                        Ok::<_, String>(View {
                            shape: Shape::new(dtype, b.dims()),
                            ptr: b.data(),
                        })
                    };
                    let inputs = (0..frame.n_args())
                        .map(|i| view(frame.arg(i)?))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    let inputs = layers_read(stacked.as_ref(), inputs)?;
                    let outputs = (0..frame.n_rets())
                        .map(|i| view(frame.ret(i)?))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    let kernel = Kernel::new(&call, inputs, outputs, &attrs, frame.thread_pool());
                    call.run(&kernel)
                })
            })
            .clone()
    }
}

impl HostKernel for CustomCall {
    fn name(&self) -> &str {
        CustomCall::name(self)
    }

    fn version(&self) -> u32 {
        CustomCall::version(self)
    }

    fn has_side_effect(&self) -> bool {
        CustomCall::has_side_effect(self)
    }

    fn aliases(&self) -> &[(usize, usize)] {
        CustomCall::aliases(self)
    }

    fn is(&self, other: &dyn HostKernel) -> bool {
        (other.as_any().downcast_ref::<CustomCall>()).is_some_and(|o| self.same(o))
    }

    /// The kernel on copies of `args` in aligned host buffers (an output
    /// that lives in an operand's buffer starts as a copy of it).
    fn run_on_host(
        &self,
        args: &[&Literal],
        results: &[Shape],
        attrs: &Attrs,
    ) -> std::result::Result<Vec<Literal>, String> {
        // Aligned for every dtype.
        let buffer = |bytes: &[u8]| {
            let mut words = vec![0u64; bytes.len().div_ceil(8)];
            // SAFETY: `words` holds at least `bytes.len()` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    words.as_mut_ptr().cast(),
                    bytes.len(),
                )
            };
            words
        };
        let mut ins: Vec<Vec<u64>> = args.iter().map(|a| buffer(&a.to_bytes())).collect();
        let mut outs: Vec<Vec<u64>> = (results.iter().enumerate())
            .map(|(j, s)| match self.aliases().iter().find(|a| a.0 == j) {
                Some(&(_, operand)) => ins[operand].clone(),
                None => vec![0u64; (s.count() * s.dtype().size_in_bytes()).div_ceil(8)],
            })
            .collect();
        let views = |bufs: &mut [Vec<u64>], shapes: &mut dyn Iterator<Item = Shape>| -> Vec<View> {
            (bufs.iter_mut().zip(shapes))
                .map(|(b, shape)| View {
                    shape: Shape::new(shape.dtype(), shape.dims()),
                    ptr: b.as_mut_ptr().cast(),
                })
                .collect()
        };
        let inputs = views(&mut ins, &mut args.iter().map(|a| a.shape()));
        let outputs = views(&mut outs, &mut results.iter().copied());
        let kernel = Kernel::new(self, inputs, outputs, attrs, None);
        self.run(&kernel)?;
        drop(kernel);
        Ok((outs.iter().zip(results))
            .map(|(b, &s)| {
                let len = s.count() * s.dtype().size_in_bytes();
                // SAFETY: `b` holds at least `len` bytes.
                let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), len) };
                Literal::from_bytes(s, bytes)
            })
            .collect())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The declaration of the custom call at `site`: radix's sites hold its
/// own declarations.
pub(crate) fn declaration(site: &Site) -> &CustomCall {
    (site.call.as_any().downcast_ref::<CustomCall>()).expect("a site holds a CustomCall")
}

impl std::fmt::Debug for CustomCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CustomCall({} v{})", self.inner.name, self.inner.version)
    }
}

impl CustomCallBuilder {
    /// Declares side effects: the call runs once per execution of its
    /// place in the program, even when nothing uses its results, and is
    /// never merged with an equal call (`has_side_effect = true`).
    pub fn side_effect(mut self) -> CustomCallBuilder {
        self.decl.side_effect = true;
        self
    }

    /// Output `output` is written in the buffer of operand `operand`
    /// (`output_operand_aliases`): the kernel finds the operand's values in
    /// the output and reads them there. With the operand donated
    /// ([`Tensor::reuse_buffer`]) nothing is copied.
    pub fn alias(mut self, output: usize, operand: usize) -> CustomCallBuilder {
        self.decl.aliases.push((output, operand));
        self
    }

    /// The same results computed with ordinary ops, compiled where the
    /// kernel cannot run. It is traced with each call's operands and
    /// attributes.
    pub fn fallback<F>(mut self, fallback: F) -> CustomCallBuilder
    where
        F: Fn(&[Tensor], &Attrs) -> Vec<Tensor> + Send + Sync + 'static,
    {
        self.types[2] = TypeId::of::<F>();
        self.decl.fallback = Some(Box::new(fallback));
        self
    }

    /// The call's derivative, which makes it differentiable by
    /// [`crate::grad`]: `derivative(operands, results, cotangents, attrs)`
    /// gives one cotangent per operand (shaped as it; the cotangent of an
    /// integer operand is ignored) from one per result, written with
    /// ordinary ops. It runs where a gradient flows through the call, as
    /// the built-in ops' rules do: its ops join the derivative at the
    /// call's line.
    pub fn derivative<F>(mut self, derivative: F) -> CustomCallBuilder
    where
        F: Fn(&[Tensor], &[Tensor], &[Tensor], &Attrs) -> Vec<Tensor> + Send + Sync + 'static,
    {
        self.types[3] = TypeId::of::<F>();
        self.decl.derivative = Some(Box::new(derivative));
        self
    }

    /// Makes the call differentiable by [`crate::grad`] through its
    /// fallback, for a kernel that computes the fallback's function: where
    /// a gradient flows through the call, the call is replaced by its
    /// fallback, whose ops are differentiated one by one. The forward pass
    /// then computes in ops what the backward pass reads (an RMS norm's
    /// reciprocal root), fused with its neighbours, instead of running
    /// the kernel beside the same ops; a call no gradient flows through
    /// stays the kernel. Declares no [`derivative`](Self::derivative) too:
    /// [`register`](Self::register) refuses both, and a call without a
    /// fallback.
    pub fn differentiate_fallback(mut self) -> CustomCallBuilder {
        self.decl.differentiate_fallback = true;
        self
    }

    /// Ends the declaration. Declaring a name again with the same
    /// semantics (version, side effects, aliases, and the same shape rule,
    /// kernel, fallback and derivative functions) returns the first declaration; with
    /// other semantics it is an [`Error::CustomCall`]. A name that is not
    /// letters, digits and `_ . $` is one too.
    pub fn register(mut self) -> Result<CustomCall> {
        let name = self.decl.name.clone();
        let err = |reason: String| Error::CustomCall {
            name: name.clone(),
            reason,
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$'))
        {
            return Err(err("a name is letters, digits and `_ . $`".into()));
        }
        if self.decl.differentiate_fallback
            && (self.decl.fallback.is_none() || self.decl.derivative.is_some())
        {
            return Err(err(
                "differentiating the fallback wants a fallback and no derivative".into(),
            ));
        }
        self.decl.aliases.sort_unstable();
        self.decl.semantics = Semantics {
            version: self.decl.version,
            side_effect: self.decl.side_effect,
            aliases: self.decl.aliases.clone(),
            differentiate_fallback: self.decl.differentiate_fallback,
            types: self.types,
        };
        let mut declared = DECLARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = declared.iter().find(|c| c.inner.name == name) {
            return if old.inner.semantics == self.decl.semantics {
                Ok(old.clone())
            } else {
                let (a, b) = (&old.inner.semantics, &self.decl.semantics);
                Err(err(format!(
                    "already declared with other semantics (version {} vs {}, side effect {} vs {}, aliases {:?} vs {:?}{})",
                    a.version,
                    b.version,
                    a.side_effect,
                    b.side_effect,
                    a.aliases,
                    b.aliases,
                    if a.types == b.types {
                        ""
                    } else {
                        ", other functions"
                    }
                )))
            };
        }
        let call = CustomCall {
            inner: Arc::new(self.decl),
        };
        declared.push(call.clone());
        Ok(call)
    }
}

/// The buffers a kernel reads for a call on `inputs` whose
/// [`layers::LAYERS_ATTR`] is `stacked`: each stack the call reads a
/// layer of replaced by a view of that layer where it lies, the layers'
/// indices dropped. `Err` names what does not fit.
fn layers_read(
    stacked: Option<&AttrValue>,
    mut inputs: Vec<View>,
) -> std::result::Result<Vec<View>, String> {
    let stacked = layers::stacked_operands(stacked, inputs.len())?;
    if stacked.is_empty() {
        return Ok(inputs);
    }
    let n = inputs.len() - stacked.len();
    for (j, &k) in stacked.iter().enumerate() {
        let index = &inputs[n + j];
        let i = match (index.shape.rank(), index.shape.dtype()) {
            // SAFETY: a rank-0 buffer of its dtype holds one aligned value.
            (0, DType::I32) => Some(i64::from(unsafe { index.ptr.cast::<i32>().read() })),
            (0, DType::I64) => Some(unsafe { index.ptr.cast::<i64>().read() }),
            _ => None,
        };
        let stack = &inputs[k];
        let dims = stack.shape.dims();
        let at = layers::layer_index(i, dims.first().copied().unwrap_or(0))?;
        let layer = Shape::new(stack.shape.dtype(), &dims[1..]);
        let bytes = layer.count() * layer.dtype().size_in_bytes();
        // SAFETY: `at` is below the stack's leading size, so the layer's
        // bytes lie inside the stack's buffer.
        let ptr = unsafe { stack.ptr.add(at * bytes) };
        inputs[k] = View { shape: layer, ptr };
    }
    inputs.truncate(n);
    Ok(inputs)
}

/// A buffer a kernel reads or writes.
pub(crate) struct View {
    pub(crate) shape: Shape,
    pub(crate) ptr: *mut u8,
}

/// What a kernel sees of one call: its inputs and outputs (host memory),
/// its attributes, and the threads it may use.
pub struct Kernel<'a> {
    inputs: Vec<View>,
    outputs: Vec<View>,
    attrs: &'a Attrs,
    aliases: &'a [(usize, usize)],
    pool: Option<ThreadPool<'a>>,
    taken: Cell<u64>,
}

impl<'a> Kernel<'a> {
    /// The kernel of `call` over `inputs` and `outputs`, which are valid,
    /// distinct (but for `call`'s aliases) and aligned for their dtype for
    /// as long as the kernel lives.
    pub(crate) fn new(
        call: &'a CustomCall,
        inputs: Vec<View>,
        outputs: Vec<View>,
        attrs: &'a Attrs,
        pool: Option<ThreadPool<'a>>,
    ) -> Kernel<'a> {
        Kernel {
            inputs,
            outputs,
            attrs,
            aliases: &call.inner.aliases,
            pool,
            taken: Cell::new(0),
        }
    }

    /// The inputs' buffers (the host-callback kernel copies them).
    pub(crate) fn inputs(&self) -> &[View] {
        &self.inputs
    }

    /// The outputs' buffers.
    pub(crate) fn outputs(&self) -> &[View] {
        &self.outputs
    }

    /// The number of inputs (operands).
    pub fn n_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// The number of outputs (results).
    pub fn n_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The shape of input `i` (without tags).
    pub fn input_shape(&self, i: usize) -> Option<Shape> {
        self.inputs.get(i).map(|v| v.shape)
    }

    /// The shape of output `j` (without tags).
    pub fn output_shape(&self, j: usize) -> Option<Shape> {
        self.outputs.get(j).map(|v| v.shape)
    }

    /// The attributes of the call.
    pub fn attrs(&self) -> &Attrs {
        self.attrs
    }

    /// Input `i` as `T`s; an `Err` if there is none, if it is not of `T`'s
    /// dtype, or if an output is written in its buffer (read it there).
    pub fn input<T: Element>(&self, i: usize) -> std::result::Result<&[T], String> {
        if let Some(&(j, _)) = self.aliases.iter().find(|a| a.1 == i) {
            return Err(format!(
                "input {i} shares its buffer with output {j}: read it there"
            ));
        }
        let v = self
            .inputs
            .get(i)
            .ok_or_else(|| format!("no input {i} (of {})", self.inputs.len()))?;
        let n = typed::<T>(v, "input", i)?;
        // SAFETY: `new`'s contract: the buffer holds `n` aligned values of
        // `T` (checked dtype; bools checked to be 0 or 1) and lives as long
        // as `self`; no output aliases it.
        Ok(unsafe { std::slice::from_raw_parts(v.ptr.cast::<T>(), n) })
    }

    /// Output `j` as `T`s, to be written (once per call: a second request
    /// for the same output is an `Err`, as is a wrong dtype). An aliased
    /// output starts out holding its operand's values.
    #[allow(clippy::mut_from_ref)] // Each output is handed out once (`taken`).
    pub fn output<T: Element>(&self, j: usize) -> std::result::Result<&mut [T], String> {
        let v = self
            .outputs
            .get(j)
            .ok_or_else(|| format!("no output {j} (of {})", self.outputs.len()))?;
        if j >= 64 || self.taken.get() & (1 << j) != 0 {
            return Err(format!("output {j} is already taken"));
        }
        let n = typed::<T>(v, "output", j)?;
        self.taken.set(self.taken.get() | 1 << j);
        // SAFETY: `new`'s contract: the buffer holds `n` aligned values of
        // `T`, is distinct from every input the kernel can read and from the
        // other outputs, and is handed out once.
        Ok(unsafe { std::slice::from_raw_parts_mut(v.ptr.cast::<T>(), n) })
    }

    /// How many threads [`Kernel::parallel_for`] can use: the calling one
    /// plus the plugin's intra-op pool (1 in the interpreter).
    pub fn n_threads(&self) -> usize {
        self.threads().n_threads()
    }

    /// Runs `f(i)` for `i` in `0..n` on up to `max_workers` threads (see
    /// [`Kernel::n_threads`]); a panic in `f` comes back as the `Err`.
    pub fn parallel_for(
        &self,
        n: usize,
        max_workers: usize,
        f: &(dyn Fn(usize) + Sync),
    ) -> std::result::Result<(), String> {
        self.threads().parallel_for(n, max_workers, f)
    }

    /// The kernel's threads as a `Sync` handle, for code that takes a
    /// thread pool of its own kind (radix-quant's `Parallel`).
    pub fn threads(&self) -> Threads<'a> {
        Threads { pool: self.pool }
    }

    /// Runs `f(k, chunk)` on the consecutive `chunk_len`-long chunks of
    /// `data` (the last may be shorter) on up to `max_workers` threads.
    pub fn parallel_chunks_mut<T: Send>(
        &self,
        data: &mut [T],
        chunk_len: usize,
        max_workers: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) -> std::result::Result<(), String> {
        struct Chunks<T>(Vec<(*mut T, usize)>);
        // SAFETY: the chunks are disjoint and each is used by one task.
        unsafe impl<T: Send> Sync for Chunks<T> {}
        impl<T> Chunks<T> {
            fn get(&self, k: usize) -> (*mut T, usize) {
                self.0[k]
            }
        }
        let chunks = Chunks(
            data.chunks_mut(chunk_len.max(1))
                .map(|c| (c.as_mut_ptr(), c.len()))
                .collect(),
        );
        self.parallel_for(chunks.0.len(), max_workers, &|k| {
            let (ptr, len) = chunks.get(k);
            // SAFETY: chunk `k` of `data`, borrowed mutably for this call,
            // disjoint from the others, used by this task alone.
            f(k, unsafe { std::slice::from_raw_parts_mut(ptr, len) })
        })
    }
}

/// The threads a kernel may use: the calling one plus the plugin's
/// intra-op pool, if it has one.
#[derive(Clone, Copy)]
pub struct Threads<'a> {
    pool: Option<ThreadPool<'a>>,
}

// SAFETY: XLA's intra-op pool (an Eigen thread pool behind
// `XLA_FFI_ThreadPool_Schedule`) takes tasks from any thread, and the pool
// and its execution context outlive the kernel's frame, which `'a` is.
unsafe impl Sync for Threads<'_> {}

impl Threads<'_> {
    /// How many threads [`Threads::parallel_for`] can use.
    pub fn n_threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.n_threads() + 1)
    }

    /// Runs `f(i)` for `i` in `0..n` on up to `max_workers` threads; a
    /// panic in `f` comes back as the `Err`.
    pub fn parallel_for(
        &self,
        n: usize,
        max_workers: usize,
        f: &(dyn Fn(usize) + Sync),
    ) -> std::result::Result<(), String> {
        parallel_for(self.pool.as_ref(), n, max_workers, f)
    }
}

/// The number of `T`s in `v`, checking its dtype.
fn typed<T: Element>(v: &View, what: &str, i: usize) -> std::result::Result<usize, String> {
    if v.shape.dtype() != T::DTYPE {
        return Err(format!(
            "{what} {i} is {}, not {}",
            v.shape.dtype(),
            T::DTYPE
        ));
    }
    let n = v.shape.count();
    if T::DTYPE == DType::Bool {
        // SAFETY: the buffer holds `n` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(v.ptr, n) };
        if bytes.iter().any(|&b| b > 1) {
            return Err(format!("{what} {i} holds a byte that is not a bool"));
        }
    }
    if n > 0 && !(v.ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(format!("{what} {i} is not aligned for {}", T::DTYPE));
    }
    Ok(n)
}

/// The custom calls a function (and the blocks inside it) uses.
fn used(f: &Function, out: &mut Vec<CustomCall>) {
    for node in &f.nodes {
        if let Op::CustomCall(site) = &node.op
            && !out.iter().any(|c| c.same(declaration(site)))
        {
            out.push(declaration(site).clone());
        }
        for body in node.op.bodies() {
            used(body, out);
        }
    }
}

/// The name of the first call site in `f` (or its bodies) of a custom
/// call whose name starts with `prefix` and for which `pick` holds, if any.
pub(crate) fn first_named_where(
    f: &Function,
    prefix: &str,
    pick: &dyn Fn(&crate::ir::ops::custom_call::Site) -> bool,
) -> Option<String> {
    f.nodes.iter().find_map(|node| {
        let here = match &node.op {
            Op::CustomCall(site) if site.call.name().starts_with(prefix) && pick(site) => {
                Some(site.call.name().to_string())
            }
            _ => None,
        };
        here.or_else(|| {
            (node.op.bodies().into_iter()).find_map(|b| first_named_where(b, prefix, pick))
        })
    })
}

/// `name version` lines of the custom calls `f` uses, sorted: what the
/// executable cache key adds to the module text.
pub(crate) fn key_text(f: &Function) -> String {
    let mut calls = vec![];
    used(f, &mut calls);
    let mut lines: Vec<String> = calls
        .iter()
        .map(|c| format!("custom_call {} {}\n", c.name(), c.version()))
        .collect();
    lines.sort();
    lines.concat()
}

/// The XLA FFI platform name the Rust kernels run on for `platform`, or
/// why there is none.
fn native_platform(platform: &Platform) -> std::result::Result<&'static str, String> {
    if platform.target() != Target::Cpu {
        return Err(format!(
            "radix has no Rust implementation on {}",
            platform.target().name()
        ));
    }
    platform
        .client()
        .plugin()
        .ffi_extension()
        .map(|_| "Host")
        .map_err(|e| e.to_string())
}

/// `f` with each custom call the platform cannot run (or every one, with
/// [`CustomCallMode::Fallback`]) replaced by a call of its fallback, or,
/// where the kernels run, with the layers of stacks that calls read taken
/// in place ([`layers::fold`]); `None` when nothing changes. An
/// [`Error::CustomCall`] names a call without a fallback.
pub(crate) fn lower(
    platform: &Platform,
    f: &Function,
    mode: CustomCallMode,
) -> Result<Option<Function>> {
    let mut calls = vec![];
    used(f, &mut calls);
    if calls.is_empty() {
        return Ok(None);
    }
    let why = match (mode, native_platform(platform)) {
        (CustomCallMode::Native, Ok(_)) => return Ok(layers::fold(f)),
        (CustomCallMode::Native, Err(why)) => why,
        (CustomCallMode::Fallback, _) => "fallbacks are forced".to_string(),
    };
    if let Some(c) = calls.iter().find(|c| c.fallback().is_none()) {
        return Err(Error::CustomCall {
            name: c.name().to_string(),
            reason: format!(
                "cannot run on platform {} ({why}) and declares no fallback",
                platform.client().platform_name()
            ),
        });
    }
    let replaced = crate::ir::ops::custom_call::replace_by_fallbacks(f);
    crate::ir::verify::debug_check(&replaced, "replacing custom calls by their fallbacks");
    Ok(Some(replaced))
}

/// Registers the kernels of the custom calls `f` uses with the platform's
/// plugin (once per process and plugin).
pub(crate) fn register(platform: &Platform, f: &Function) -> Result<()> {
    let mut calls = vec![];
    used(f, &mut calls);
    if calls.is_empty() {
        return Ok(());
    }
    let target = native_platform(platform).map_err(|why| Error::CustomCall {
        name: calls[0].name().to_string(),
        reason: why,
    })?;
    let plugin = platform.client().plugin();
    for c in &calls {
        register_handler(plugin, c.name(), target, c.handler()).map_err(|e| Error::CustomCall {
            name: c.name().to_string(),
            reason: e.to_string(),
        })?;
    }
    Ok(())
}
