//! Custom calls of Rust kernels (`stablehlo.custom_call` with
//! `api_version = 4`): the call site, its printing, its reference semantics,
//! which run the kernel itself on host literals, and the replacement of
//! calls by their fallbacks. The declaration API is [`crate::custom_call`];
//! recording a call is `tensor/custom_call.rs`.

use crate::Shape;
use crate::custom_call::{AttrValue, Attrs, CustomCall, Kernel, View};
use crate::ir::ops::Control;
use crate::ir::print::{OpPrinter, i64_list};
use crate::ir::{Function, Node, Op};
use crate::literal::Literal;
use radix_pjrt::custom_call::NAME_ATTR;
use std::fmt::Write;
use std::sync::Arc;

/// One use of a custom call: the call, its attributes, its result shapes
/// and, when declared, its fallback traced for these operands.
pub(crate) struct Site {
    pub(crate) call: CustomCall,
    pub(crate) attrs: Attrs,
    pub(crate) results: Vec<Shape>,
    pub(crate) fallback: Option<Arc<Function>>,
}

impl Site {
    pub(crate) fn has_side_effect(&self) -> bool {
        self.call.has_side_effect()
    }
}

impl PartialEq for Site {
    fn eq(&self, other: &Site) -> bool {
        self.call.same(&other.call)
            && self.attrs == other.attrs
            && self.results == other.results
            && self.fallback == other.fallback
    }
}

impl Eq for Site {}

impl std::hash::Hash for Site {
    // The declaration by its name and version (equal sites share one
    // declaration); the fallback follows from the rest.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self.call.name(), self.call.version()).hash(h);
        self.attrs.hash(h);
        self.results.hash(h);
    }
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {:?} {:?}", self.call, self.attrs, self.results)
    }
}

/// `"stablehlo.custom_call"(...) {api_version = 4 : i32, backend_config = {...}, ...}`.
pub(crate) fn print(site: &Site, p: &mut OpPrinter<'_>) {
    let name = site.call.name();
    let mut config = format!("{NAME_ATTR} = {}", string(name));
    for (k, v) in site.attrs.entries() {
        let _ = write!(config, ", {k} = {}", attr(v));
    }
    let mut attrs = format!(
        "api_version = 4 : i32, backend_config = {{{config}}}, call_target_name = {}, has_side_effect = {}",
        string(name),
        site.has_side_effect()
    );
    if !site.call.aliases().is_empty() {
        let tuple = site.results.len() > 1;
        let aliases: Vec<String> = site
            .call
            .aliases()
            .iter()
            .map(|&(out, operand)| {
                let index = if tuple { vec![out as i64] } else { vec![] };
                format!(
                    "#stablehlo.output_operand_alias<output_tuple_indices = {}, operand_index = {operand}, operand_tuple_indices = []>",
                    i64_list(index)
                )
            })
            .collect();
        let _ = write!(attrs, ", output_operand_aliases = [{}]", aliases.join(", "));
    }
    let n = p.arg_shapes().len();
    p.multi("stablehlo.custom_call", n, &[], &attrs, &site.results);
}

/// An attribute value in MLIR: floats as exact hex scalars, arrays as
/// `array<T: ...>` (float elements in shortest round-trip decimal).
fn attr(v: &AttrValue) -> String {
    fn list<T: std::fmt::Display>(ty: &str, xs: &[T], f: impl Fn(&T) -> String) -> String {
        if xs.is_empty() {
            return format!("array<{ty}>");
        }
        let items: Vec<String> = xs.iter().map(f).collect();
        format!("array<{ty}: {}>", items.join(", "))
    }
    fn decimal(s: String) -> String {
        // MLIR wants a `.` in a float literal: `1e-7` → `1.0e-7`.
        if s.contains('.') {
            s
        } else if let Some(i) = s.find('e') {
            format!("{}.0{}", &s[..i], &s[i..])
        } else {
            format!("{s}.0")
        }
    }
    match v {
        AttrValue::Bool(b) => b.to_string(),
        AttrValue::I32(x) => format!("{x} : i32"),
        AttrValue::I64(x) => format!("{x} : i64"),
        AttrValue::F32(x) => format!("0x{:08X} : f32", x.to_bits()),
        AttrValue::F64(x) => format!("0x{:016X} : f64", x.to_bits()),
        AttrValue::Str(s) => string(s),
        AttrValue::I32s(xs) => list("i32", xs, |x| x.to_string()),
        AttrValue::I64s(xs) => list("i64", xs, |x| x.to_string()),
        AttrValue::F32s(xs) => list("f32", xs, |x| decimal(format!("{x:?}"))),
        AttrValue::F64s(xs) => list("f64", xs, |x| decimal(format!("{x:?}"))),
    }
}

/// An MLIR string literal (`\XX` escapes for quotes, backslashes and
/// anything not printable ASCII).
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b as char);
        } else {
            let _ = write!(out, "\\{b:02X}");
        }
    }
    out.push('"');
    out
}

/// The reference semantics: the kernel run on copies of `args`. A kernel
/// error or panic is a panic here, naming the call.
pub(crate) fn eval(site: &Site, args: &[&Literal]) -> Vec<Literal> {
    // Aligned for every dtype.
    let buffer = |bytes: &[u8]| {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: `words` holds at least `bytes.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast(), bytes.len())
        };
        words
    };
    let mut ins: Vec<Vec<u64>> = args.iter().map(|a| buffer(&a.to_bytes())).collect();
    let mut outs: Vec<Vec<u64>> = site
        .results
        .iter()
        .enumerate()
        .map(
            |(j, s)| match site.call.aliases().iter().find(|a| a.0 == j) {
                Some(&(_, operand)) => ins[operand].clone(),
                None => vec![0u64; (s.count() * s.dtype().size_in_bytes()).div_ceil(8)],
            },
        )
        .collect();
    let views = |bufs: &mut [Vec<u64>], shapes: &mut dyn Iterator<Item = Shape>| -> Vec<View> {
        bufs.iter_mut()
            .zip(shapes)
            .map(|(b, shape)| View {
                shape: Shape::new(shape.dtype(), shape.dims()),
                ptr: b.as_mut_ptr().cast(),
            })
            .collect()
    };
    let inputs = views(&mut ins, &mut args.iter().map(|a| a.shape()));
    let outputs = views(&mut outs, &mut site.results.iter().copied());
    let kernel = Kernel::new(&site.call, inputs, outputs, &site.attrs, None);
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| site.call.run(&kernel)));
    match res {
        Ok(Ok(())) => {}
        Ok(Err(msg)) => panic!("custom call {} failed: {msg}", site.call.name()),
        Err(p) => std::panic::resume_unwind(p),
    }
    drop(kernel);
    outs.iter()
        .zip(&site.results)
        .map(|(b, &s)| {
            let len = s.count() * s.dtype().size_in_bytes();
            // SAFETY: `b` holds at least `len` bytes.
            let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), len) };
            Literal::from_bytes(s, bytes)
        })
        .collect()
}

/// `f` with every custom call replaced by a `func.call` of its fallback
/// (which [`crate::custom_call::lower`] checked every call has), in nested
/// blocks and fallbacks too.
pub(crate) fn replace_by_fallbacks(f: &Function) -> Function {
    let mut out = Function::default();
    for (node, &loc) in f.nodes.iter().zip(&f.locs) {
        let op = match &node.op {
            Op::CustomCall(site) => {
                let body = replace_by_fallbacks(site.fallback.as_ref().expect("checked"));
                fallback_call(site, Arc::new(body))
            }
            op => op.map_bodies(&replace_by_fallbacks),
        };
        out.push_rebuilt(Node { op, ..node.clone() }, loc);
    }
    out.params = f.params.clone();
    out.results = f.results.clone();
    out.reuses = f.reuses.clone();
    out
}

/// A `func.call` of `body`, the fallback of `site` (or a rewrite of it),
/// in place of the custom call: the same operands and results.
pub(crate) fn fallback_call(site: &Site, body: Arc<Function>) -> Op {
    let name = format!("{}_fallback", site.call.name());
    Op::Control(Control::Call {
        name: crate::ir::private_name(&name, &body),
        f: body,
        checkpoint: false,
    })
}
