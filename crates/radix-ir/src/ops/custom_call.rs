//! Custom calls of Rust kernels (`stablehlo.custom_call` with
//! `api_version = 4`): the call site, its printing, its reference semantics,
//! which run the kernel itself on host literals, and the replacement of
//! calls by their fallbacks. The kernel is a [`HostKernel`]: the IR knows
//! its declaration (radix's `custom_call.rs`, the public API) only through
//! it; recording a call is radix's `tensor/custom_call.rs`.

use crate::Shape;
use crate::literal::Literal;
use crate::ops::Control;
use crate::print::{OpPrinter, i64_list};
use crate::{Function, Node, Op};
use radix_io::attr::{AttrValue, Attrs, NAME_ATTR};
use std::fmt::Write;
use std::sync::Arc;

/// What the IR knows of a custom call's declaration (radix's `CustomCall`
/// implements it): its identity, what its printing reads, and its kernel
/// run on host copies of the operands, the op's reference semantics.
pub trait HostKernel: Send + Sync + std::fmt::Debug {
    /// The call target's name.
    fn name(&self) -> &str;
    /// The implementation's version (the executable cache's key holds it).
    fn version(&self) -> u32;
    /// Whether the call has side effects: never merged or removed.
    fn has_side_effect(&self) -> bool;
    /// `(output, operand)`: the outputs that live in an operand's buffer.
    fn aliases(&self) -> &[(usize, usize)];
    /// Whether `other` is this declaration.
    fn is(&self, other: &dyn HostKernel) -> bool;
    /// The kernel run on host copies of `args` with `attrs`, giving
    /// `results`; an `Err` says why the kernel failed.
    fn run_on_host(
        &self,
        args: &[&Literal],
        results: &[Shape],
        attrs: &Attrs,
    ) -> Result<Vec<Literal>, String>;
    /// The declaration itself, for the code that made it.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// One use of a custom call: the call, its attributes, its result shapes
/// and, when declared, its fallback traced for these operands.
pub struct Site {
    /// The call's declaration, as the IR knows it.
    pub call: Arc<dyn HostKernel>,
    /// The attributes of this use (its `backend_config`).
    pub attrs: Attrs,
    /// The types of its results.
    pub results: Vec<Shape>,
    /// The fallback traced for these operands, when declared.
    pub fallback: Option<Arc<Function>>,
}

impl Site {
    /// Whether the call has side effects: never merged or removed.
    pub fn has_side_effect(&self) -> bool {
        self.call.has_side_effect()
    }
}

impl PartialEq for Site {
    fn eq(&self, other: &Site) -> bool {
        self.call.is(&*other.call)
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
pub fn print(site: &Site, p: &mut OpPrinter<'_>) {
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

/// The reference semantics: the kernel run on copies of `args` (a stack's
/// layer where the call reads one, [`crate::passes::layers`]). A kernel
/// error is a panic here, naming the call.
pub fn eval(site: &Site, args: &[&Literal]) -> Vec<Literal> {
    let read = crate::passes::layers::layers_read(&site.attrs, args);
    let (attrs, read) =
        read.unwrap_or_else(|msg| panic!("custom call {}: {msg}", site.call.name()));
    let args: Vec<&Literal> = read.iter().map(|a| a.as_ref()).collect();
    match site.call.run_on_host(&args, &site.results, &attrs) {
        Ok(outs) => outs,
        Err(msg) => panic!("custom call {} failed: {msg}", site.call.name()),
    }
}

/// `f` with every custom call replaced by a `func.call` of its fallback
/// (which the compiler checked every call has), in nested
/// blocks and fallbacks too.
pub fn replace_by_fallbacks(f: &Function) -> Function {
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
pub fn fallback_call(site: &Site, body: Arc<Function>) -> Op {
    let name = format!("{}_fallback", site.call.name());
    Op::Control(Control::Call {
        name: crate::private_name(&name, &body),
        f: body,
        checkpoint: false,
    })
}
