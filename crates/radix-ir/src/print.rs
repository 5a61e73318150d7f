//! Printing a [`Function`] as a StableHLO module in MLIR's generic op form.
//!
//! Deterministic: values are numbered in node order, and only nodes the
//! results depend on are printed. Each op carries `loc("file":line:col)`
//! from the user's call site.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::Shape;
use crate::sharding::{Mesh, Partitioner};
use crate::{Function, Op};

/// Whether printed ops carry their source locations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locations {
    /// `loc("file":line:col)` after every op and argument (dumps, errors).
    Include,
    /// No locations: the text the executable cache hashes, so moving code
    /// around does not change a program's key.
    Omit,
}

/// Attributes of `@main` and its module: per argument and per result (each
/// the inside of `{...}`, empty for none), and of the module.
#[derive(Debug, Clone, Default)]
pub struct Signature {
    /// One entry per parameter (or none at all).
    pub arg_attrs: Vec<String>,
    /// One entry per result (or none at all).
    pub result_attrs: Vec<String>,
    /// The module's attributes, e.g. `mhlo.num_partitions = 4 : i32`.
    pub module_attrs: String,
    /// The mesh sharding constraints inside the module are printed for.
    pub mesh: Option<Mesh>,
    /// Whose attributes the shardings are printed as.
    pub partitioner: Partitioner,
}

/// The module text of `f` as `@main` with `sig`'s attributes, after the
/// private functions its `func.call`s name (each printed once).
pub fn print_module_signed(f: &Function, locs: Locations, sig: &Signature) -> String {
    let ctx = Ctx {
        locs,
        funcs: RefCell::new(BTreeMap::new()),
        mesh: sig.mesh.clone(),
        partitioner: sig.partitioner,
        channels: Cell::new(0),
    };
    let mut out = String::with_capacity(f.nodes.len() * 120 + 256);
    let mut names: Vec<String> = vec![String::new(); f.nodes.len()];
    out.push_str("  func.func @main(");
    for (i, &p) in f.params.iter().enumerate() {
        let name = format!("%arg{i}");
        let node = f.node(p);
        if i > 0 {
            out.push_str(", ");
        }
        let attrs = match sig.arg_attrs.get(i) {
            Some(a) if !a.is_empty() => format!(" {{{a}}}"),
            _ => String::new(),
        };
        let _ = write!(
            out,
            "{name}: {}{attrs}{}",
            tensor_type(&node.shape),
            ctx.loc_of(f.loc(p))
        );
        names[p.0 as usize] = name;
    }
    out.push_str(") -> (");
    for (i, &r) in f.results.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&tensor_type(&f.node(r).shape));
        if let Some(a) = sig.result_attrs.get(i).filter(|a| !a.is_empty()) {
            let _ = write!(out, " {{{a}}}");
        }
    }
    out.push_str(") {\n");
    print_body(&ctx, &mut out, f, &mut names, "%", "func.return");
    out.push_str("  }\n}\n");
    let mut res = String::from("module @radix ");
    if !sig.module_attrs.is_empty() {
        let _ = write!(res, "attributes {{{}}} ", sig.module_attrs);
    }
    res.push_str("{\n");
    if let (Some(mesh), Partitioner::Shardy) = (&sig.mesh, sig.partitioner) {
        let _ = writeln!(res, "  {}", mesh.sdy_mesh());
    }
    for text in ctx.funcs.into_inner().into_values() {
        res.push_str(&text);
    }
    res.push_str(&out);
    res
}

/// What printing a module shares: the location mode and the private
/// functions printed so far, by name.
pub struct Ctx {
    locs: Locations,
    funcs: RefCell<BTreeMap<String, String>>,
    mesh: Option<Mesh>,
    partitioner: Partitioner,
    /// The last channel id a collective took.
    channels: Cell<i64>,
}

impl Ctx {
    fn loc_of(&self, l: &std::panic::Location<'_>) -> String {
        match self.locs {
            Locations::Include => format!(" loc({})", loc(l)),
            Locations::Omit => String::new(),
        }
    }
}

/// Prints the live nodes of `f` (whose parameters are already named in
/// `names`), naming values `{prefix}{n}`, then `"{ret}"(results)`.
fn print_body(
    ctx: &Ctx,
    out: &mut String,
    f: &Function,
    names: &mut [String],
    prefix: &str,
    ret: &str,
) {
    let live = f.reachable();
    let mut next = 0usize;
    // The values of multi-result ops printed as several ops, by node.
    let mut results_of: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (i, node) in f.nodes.iter().enumerate() {
        if !live[i] || matches!(node.op, Op::Parameter(_)) {
            continue;
        }
        if let Op::Project(k) = node.op {
            let producer = node.args[0].0 as usize;
            names[i] = match results_of.get(&producer) {
                Some(results) => results[k].clone(),
                None => format!("{}#{k}", names[producer]),
            };
            continue;
        }
        let name = format!("{prefix}{next}");
        next += 1;
        let args: Vec<&str> = node
            .args
            .iter()
            .map(|a| names[a.0 as usize].as_str())
            .collect();
        let arg_shapes: Vec<Shape> = node.args.iter().map(|&a| f.node(a).shape).collect();
        let mut p = OpPrinter {
            ctx,
            out,
            res: &name,
            args: &args,
            arg_shapes: &arg_shapes,
            shape: node.shape,
            loc: ctx.loc_of(f.locs[i]),
            results: None,
        };
        node.op.print(&mut p);
        if let Some(results) = p.results {
            results_of.insert(i, results);
        }
        names[i] = name;
    }
    let _ = write!(out, "    \"{ret}\"(");
    push_list(out, f.results.iter().map(|r| names[r.0 as usize].as_str()));
    out.push_str(") : (");
    push_types(out, f.results.iter().map(|&r| &f.node(r).shape));
    out.push_str(") -> ()\n");
}

/// What an op's printer sees: its result name, operands, shapes and location.
pub struct OpPrinter<'a> {
    ctx: &'a Ctx,
    out: &'a mut String,
    res: &'a str,
    args: &'a [&'a str],
    arg_shapes: &'a [Shape],
    shape: Shape,
    /// ` loc(...)`, or empty when locations are omitted.
    loc: String,
    /// The names of a multi-result op's values where they are not
    /// `%res#k` ([`OpPrinter::name_results`]).
    results: Option<Vec<String>>,
}

impl OpPrinter<'_> {
    /// The result's shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The operands' shapes.
    pub fn arg_shapes(&self) -> &[Shape] {
        self.arg_shapes
    }

    /// Prints `%res = "op"(args) {attrs} : (types) -> type loc`.
    pub fn generic(&mut self, op: &str, attrs: &str) {
        self.generic_with(op, "", attrs);
    }

    /// Like [`OpPrinter::generic`], with a region text (from
    /// [`OpPrinter::region`]) after the operands.
    pub fn generic_with(&mut self, op: &str, region: &str, attrs: &str) {
        let o = &mut *self.out;
        let _ = write!(o, "    {} = \"{op}\"(", self.res);
        push_list(o, self.args.iter().copied());
        o.push(')');
        if !region.is_empty() {
            let _ = write!(o, " ({{\n{region}    }})");
        }
        if !attrs.is_empty() {
            let _ = write!(o, " {{{attrs}}}");
        }
        o.push_str(" : (");
        push_types(o, self.arg_shapes.iter());
        let _ = writeln!(o, ") -> {}{}", tensor_type(&self.shape), self.loc);
    }

    /// The partitioner the module's shardings are printed for, and the
    /// mesh, if the module has one.
    pub fn partitioning(&self) -> (Partitioner, Option<&Mesh>) {
        (self.ctx.partitioner, self.ctx.mesh.as_ref())
    }

    /// The operands' names.
    pub fn arg_names(&self) -> &[&str] {
        self.args
    }

    /// A region printing `f`: its first `n_block_args` parameters become
    /// the block's arguments, the others (captures) name `captures`.
    pub fn region(&self, k: usize, f: &Function, n_block_args: usize, captures: &[&str]) -> String {
        self.region_ending(k, f, n_block_args, captures, "stablehlo.return")
    }

    /// [`OpPrinter::region`] ended by the op `ret` (a dialect's own
    /// terminator, such as `sdy.return`).
    pub fn region_ending(
        &self,
        k: usize,
        f: &Function,
        n_block_args: usize,
        captures: &[&str],
        ret: &str,
    ) -> String {
        let prefix = format!("{}_{k}_", self.region_prefix());
        let mut names = vec![String::new(); f.nodes.len()];
        let mut out = String::from(if n_block_args > 0 { "      ^bb0(" } else { "" });
        for (i, &p) in f.params.iter().enumerate() {
            if i < n_block_args {
                let name = format!("{prefix}a{i}");
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{name}: {}", tensor_type(&f.node(p).shape));
                names[p.0 as usize] = name;
            } else {
                names[p.0 as usize] = captures[i - n_block_args].to_string();
            }
        }
        if n_block_args > 0 {
            out.push_str("):\n");
        }
        print_body(self.ctx, &mut out, f, &mut names, &prefix, ret);
        out
    }

    /// Prints `{name} = {op}` with the op's location: one of the several
    /// ops that print one node.
    pub fn line(&mut self, name: &str, op: &str) {
        let _ = writeln!(self.out, "    {name} = {op}{}", self.loc);
    }

    /// Names the values of this multi-result op, when its printer wrote
    /// them as separate ops (with [`OpPrinter::line`]) instead of one
    /// `%res:n`.
    pub fn name_results(&mut self, names: Vec<String>) {
        self.results = Some(names);
    }

    /// A channel id no other collective of the module has (from 1).
    pub fn next_channel(&self) -> i64 {
        let next = self.ctx.channels.get() + 1;
        self.ctx.channels.set(next);
        next
    }

    /// Prints the private function `@name` for `f` once per module.
    pub fn private_function(&self, name: &str, f: &Function) {
        if self.ctx.funcs.borrow().contains_key(name) {
            return;
        }
        let mut out = format!("  func.func private @{name}(");
        let mut names = vec![String::new(); f.nodes.len()];
        for (i, &p) in f.params.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "%arg{i}: {}", tensor_type(&f.node(p).shape));
            names[p.0 as usize] = format!("%arg{i}");
        }
        out.push_str(") -> (");
        push_types(&mut out, f.results.iter().map(|&r| &f.node(r).shape));
        out.push_str(") {\n");
        print_body(self.ctx, &mut out, f, &mut names, "%", "func.return");
        out.push_str("  }\n");
        self.ctx.funcs.borrow_mut().insert(name.to_string(), out);
    }

    /// Prints a multi-result op: `%res:n = "op"(args) (regions) {attrs} : (types) -> (types)`.
    /// Only the first `n_operands` operands are printed (the others are
    /// captures, which regions name directly).
    pub fn multi(
        &mut self,
        op: &str,
        n_operands: usize,
        regions: &[String],
        attrs: &str,
        results: &[Shape],
    ) {
        let o = &mut *self.out;
        let _ = write!(o, "    {}:{} = \"{op}\"(", self.res, results.len());
        push_list(o, self.args[..n_operands].iter().copied());
        o.push(')');
        if !regions.is_empty() {
            o.push_str(" (");
            for (i, r) in regions.iter().enumerate() {
                if i > 0 {
                    o.push_str(", ");
                }
                let _ = write!(o, "{{\n{r}    }}");
            }
            o.push(')');
        }
        if !attrs.is_empty() {
            let _ = write!(o, " {{{attrs}}}");
        }
        o.push_str(" : (");
        push_types(o, self.arg_shapes[..n_operands].iter());
        o.push_str(") -> (");
        push_types(o, results.iter());
        let _ = writeln!(o, "){}", self.loc);
    }

    /// A unique prefix for names inside this op's regions.
    pub fn region_prefix(&self) -> String {
        format!("%r{}", &self.res[1..])
    }
}

/// `tensor<2x3xf32>`.
pub fn tensor_type(shape: &Shape) -> String {
    let mut s = String::from("tensor<");
    for d in shape.dims() {
        let _ = write!(s, "{d}x");
    }
    s.push_str(shape.dtype().mlir_name());
    s.push('>');
    s
}

/// A `dense<...> : tensor<...>` attribute for the little-endian `bytes` of
/// `shape` (hex; one element's bytes mean a splat).
pub fn dense(shape: &Shape, bytes: &[u8]) -> String {
    let ty = tensor_type(shape);
    if shape.dtype() == crate::DType::Bool {
        let all_same = bytes.windows(2).all(|w| w[0] == w[1]);
        if all_same && !bytes.is_empty() {
            return format!("dense<{}> : {ty}", bytes[0] != 0);
        }
        let mut s = String::new();
        nested(&mut s, shape.dims(), bytes);
        return format!("dense<{s}> : {ty}");
    }
    let mut hex = String::with_capacity(bytes.len() * 2 + 2);
    hex.push_str("0x");
    for b in bytes {
        let _ = write!(hex, "{b:02X}");
    }
    format!("dense<\"{hex}\"> : {ty}")
}

fn nested(s: &mut String, dims: &[i64], bytes: &[u8]) {
    match dims.split_first() {
        None => s.push_str(if bytes[0] != 0 { "true" } else { "false" }),
        Some((&d, rest)) => {
            let step = bytes.len() / (d.max(1) as usize);
            s.push('[');
            for i in 0..d as usize {
                if i > 0 {
                    s.push_str(", ");
                }
                nested(s, rest, &bytes[i * step..(i + 1) * step]);
            }
            s.push(']');
        }
    }
}

/// `array<i64: 1, 2>`.
pub fn i64_array(values: impl IntoIterator<Item = i64>) -> String {
    let mut s = String::from("array<i64");
    for (i, v) in values.into_iter().enumerate() {
        let _ = write!(s, "{}{v}", if i == 0 { ": " } else { ", " });
    }
    s.push('>');
    s
}

/// `[1, 2]`.
pub fn i64_list(values: impl IntoIterator<Item = i64>) -> String {
    let v: Vec<String> = values.into_iter().map(|v| v.to_string()).collect();
    format!("[{}]", v.join(", "))
}

fn loc(l: &std::panic::Location<'_>) -> String {
    format!("{:?}:{}:{}", l.file(), l.line(), l.column())
}

fn push_list<'s>(out: &mut String, items: impl Iterator<Item = &'s str>) {
    for (i, s) in items.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(s);
    }
}

fn push_types<'s>(out: &mut String, shapes: impl Iterator<Item = &'s Shape>) {
    for (i, s) in shapes.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&tensor_type(s));
    }
}
