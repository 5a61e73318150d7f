//! Model trees: the [`Module`] trait visits every tensor of a value in one
//! fixed depth-first order with its dotted path (`layers.3.attn.q.weight`).
//! That order is the executable's argument ABI: tracing, binding and results
//! all walk it. `#[derive(Module)]` implements it for structs.

use std::convert::Infallible;

use crate::{Buffer, Shape, Tensor};

/// A tree of tensors: structs (via `#[derive(Module)]`), `Option`, `Vec`,
/// arrays, `Box`, tuples, and plain values holding none.
///
/// The same tree with other leaves is [`Module::With`]: a model's weights on
/// a device are a [`Bufferized`] model, the shapes it compiles for are its
/// [`Shapes`]. `#[derive(Module)]` generates that type for a struct, so a
/// model is written once.
pub trait Module {
    /// This tree with an `L` in place of each tensor; plain values stay as
    /// they are.
    type With<L>;

    /// Calls `f` on each tensor with its path, in declaration order.
    /// `path` holds the path to `self` and is restored before returning.
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor));

    /// Like [`Module::visit`], with mutable access.
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor));

    /// The same tree with `f(path, tensor)` in place of each tensor, made
    /// in visit order; plain values are cloned. The first `Err` stops it
    /// and is returned as it is.
    fn map<L, E>(
        &self,
        path: &mut String,
        f: &mut dyn FnMut(&str, &Tensor) -> Result<L, E>,
    ) -> Result<Self::With<L>, E>;

    /// Calls `f` on each leaf of `tree` with its path, in visit order.
    fn visit_leaves<'a, L>(
        tree: &'a Self::With<L>,
        path: &mut String,
        f: &mut dyn FnMut(&str, &'a L),
    );
}

/// A model tree with [`Buffer`] leaves: its weights (or inputs, or results)
/// on a device. Buffers are shared handles, so one set of weights serves
/// every executable compiled for the model.
pub type Bufferized<M> = <M as Module>::With<Buffer>;

/// A model tree with [`Shape`] leaves: what it compiles for.
pub type Shapes<M> = <M as Module>::With<Shape>;

/// Marks the end of a path prefix that glues to the next field name (see
/// [`with_prefix`]); never part of a finished path.
const GLUE: char = '\u{0}';

/// Runs `f` with `path` extended by `.name` (no dot at the root, nor after
/// a [`with_prefix`]).
pub fn with_field<R>(path: &mut String, name: &str, f: impl FnOnce(&mut String) -> R) -> R {
    let glued = path.ends_with(GLUE);
    if glued {
        path.pop();
    }
    let len = path.len();
    if !glued && !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
    let res = f(path);
    path.truncate(len);
    if glued {
        path.push(GLUE);
    }
    res
}

/// Runs `f` with `path` extended by `.prefix` glued to the next field name:
/// a field marked `#[module(prefix = "ffn_")]` holding a `gate` gives
/// `ffn_gate`, as checkpoints that flatten a layer's names do.
pub fn with_prefix<R>(path: &mut String, prefix: &str, f: impl FnOnce(&mut String) -> R) -> R {
    with_field(path, prefix, |p| {
        p.push(GLUE);
        f(p)
    })
}

/// `path` as a finished name (a leaf right under a prefix field ends with
/// the prefix itself).
fn leaf_path(path: &str) -> &str {
    path.strip_suffix(GLUE).unwrap_or(path)
}

/// The tensors of `m` with their paths, in ABI order.
pub fn tensors<M: Module + ?Sized>(m: &M) -> Vec<(String, Tensor)> {
    let mut res = vec![];
    m.visit(&mut String::new(), &mut |p, t| {
        res.push((p.to_string(), *t))
    });
    res
}

/// The leaves of `tree` (a [`Module::With`] tree of `M`) in ABI order.
pub fn leaves<M: Module + ?Sized, L>(tree: &M::With<L>) -> Vec<&L> {
    let mut res = vec![];
    M::visit_leaves(tree, &mut String::new(), &mut |_, l| res.push(l));
    res
}

/// The shapes of `m`'s tensors, as the same tree.
pub fn shapes<M: Module + ?Sized>(m: &M) -> Shapes<M> {
    let shapes = m.map::<Shape, Infallible>(&mut String::new(), &mut |_, t| Ok(t.shape()));
    match shapes {
        Ok(s) => s,
        Err(never) => match never {},
    }
}

impl Module for Tensor {
    type With<L> = L;
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        f(leaf_path(path), self)
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        f(leaf_path(path), self)
    }
    fn map<L, E>(
        &self,
        path: &mut String,
        f: &mut dyn FnMut(&str, &Tensor) -> Result<L, E>,
    ) -> Result<L, E> {
        f(leaf_path(path), self)
    }
    fn visit_leaves<'a, L>(tree: &'a L, path: &mut String, f: &mut dyn FnMut(&str, &'a L)) {
        f(leaf_path(path), tree)
    }
}

impl<T: Module> Module for Option<T> {
    type With<L> = Option<T::With<L>>;
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        if let Some(x) = self {
            x.visit(path, f)
        }
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        if let Some(x) = self {
            x.visit_mut(path, f)
        }
    }
    fn map<L, E>(
        &self,
        path: &mut String,
        f: &mut dyn FnMut(&str, &Tensor) -> Result<L, E>,
    ) -> Result<Self::With<L>, E> {
        self.as_ref().map(|x| x.map(path, f)).transpose()
    }
    fn visit_leaves<'a, L>(
        tree: &'a Self::With<L>,
        path: &mut String,
        f: &mut dyn FnMut(&str, &'a L),
    ) {
        if let Some(x) = tree {
            T::visit_leaves(x, path, f)
        }
    }
}

impl<T: Module + ?Sized> Module for Box<T> {
    type With<L> = Box<T::With<L>>;
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        (**self).visit(path, f)
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        (**self).visit_mut(path, f)
    }
    fn map<L, E>(
        &self,
        path: &mut String,
        f: &mut dyn FnMut(&str, &Tensor) -> Result<L, E>,
    ) -> Result<Self::With<L>, E> {
        Ok(Box::new((**self).map(path, f)?))
    }
    fn visit_leaves<'a, L>(
        tree: &'a Self::With<L>,
        path: &mut String,
        f: &mut dyn FnMut(&str, &'a L),
    ) {
        T::visit_leaves(tree, path, f)
    }
}

/// Visits the leaves of the twins of a slice's or array's items, each under
/// its index.
fn visit_items<'a, T: Module, L>(
    items: &'a [T::With<L>],
    path: &mut String,
    f: &mut dyn FnMut(&str, &'a L),
) {
    for (i, x) in items.iter().enumerate() {
        with_field(path, &i.to_string(), |p| T::visit_leaves(x, p, f));
    }
}

impl<T: Module> Module for [T] {
    type With<L> = Vec<T::With<L>>;
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        for (i, x) in self.iter().enumerate() {
            with_field(path, &i.to_string(), |p| x.visit(p, f));
        }
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        for (i, x) in self.iter_mut().enumerate() {
            with_field(path, &i.to_string(), |p| x.visit_mut(p, f));
        }
    }
    fn map<L, E>(
        &self,
        path: &mut String,
        f: &mut dyn FnMut(&str, &Tensor) -> Result<L, E>,
    ) -> Result<Self::With<L>, E> {
        let mut res = Vec::with_capacity(self.len());
        for (i, x) in self.iter().enumerate() {
            res.push(with_field(path, &i.to_string(), |p| x.map(p, f))?);
        }
        Ok(res)
    }
    fn visit_leaves<'a, L>(
        tree: &'a Self::With<L>,
        path: &mut String,
        f: &mut dyn FnMut(&str, &'a L),
    ) {
        visit_items::<T, L>(tree, path, f)
    }
}

impl<T: Module> Module for Vec<T> {
    type With<L> = Vec<T::With<L>>;
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        self.as_slice().visit(path, f)
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        self.as_mut_slice().visit_mut(path, f)
    }
    fn map<L, E>(
        &self,
        path: &mut String,
        f: &mut dyn FnMut(&str, &Tensor) -> Result<L, E>,
    ) -> Result<Self::With<L>, E> {
        self.as_slice().map(path, f)
    }
    fn visit_leaves<'a, L>(
        tree: &'a Self::With<L>,
        path: &mut String,
        f: &mut dyn FnMut(&str, &'a L),
    ) {
        <[T]>::visit_leaves(tree, path, f)
    }
}

impl<T: Module, const N: usize> Module for [T; N] {
    type With<L> = [T::With<L>; N];
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        self.as_slice().visit(path, f)
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        self.as_mut_slice().visit_mut(path, f)
    }
    fn map<L, E>(
        &self,
        path: &mut String,
        f: &mut dyn FnMut(&str, &Tensor) -> Result<L, E>,
    ) -> Result<Self::With<L>, E> {
        let items = self.as_slice().map(path, f)?;
        match items.try_into() {
            Ok(a) => Ok(a),
            Err(_) => unreachable!("{N} items mapped from {N}"),
        }
    }
    fn visit_leaves<'a, L>(
        tree: &'a Self::With<L>,
        path: &mut String,
        f: &mut dyn FnMut(&str, &'a L),
    ) {
        visit_items::<T, L>(tree, path, f)
    }
}

/// Values that hold no tensor: the same with any leaves.
macro_rules! plain {
    ($($t:ty),*) => {$(
        impl Module for $t {
            type With<L> = $t;
            fn visit(&self, _: &mut String, _: &mut dyn FnMut(&str, &Tensor)) {}
            fn visit_mut(&mut self, _: &mut String, _: &mut dyn FnMut(&str, &mut Tensor)) {}
            fn map<L, E>(&self, _: &mut String, _: &mut dyn FnMut(&str, &Tensor) -> Result<L, E>) -> Result<$t, E> {
                Ok(self.clone())
            }
            fn visit_leaves<'a, L>(_: &'a $t, _: &mut String, _: &mut dyn FnMut(&str, &'a L)) {}
        }
    )*};
}
plain!(
    (),
    bool,
    u8,
    u16,
    u32,
    u64,
    usize,
    i8,
    i16,
    i32,
    i64,
    isize,
    f32,
    f64,
    String,
    crate::DType,
    crate::Shape
);

macro_rules! tuple {
    ($($n:tt $t:ident),*) => {
        impl<$($t: Module),*> Module for ($($t,)*) {
            type With<L> = ($($t::With<L>,)*);
            fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
                $(with_field(path, stringify!($n), |p| self.$n.visit(p, f));)*
            }
            fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
                $(with_field(path, stringify!($n), |p| self.$n.visit_mut(p, f));)*
            }
            fn map<L, Fail>(
                &self,
                path: &mut String,
                f: &mut dyn FnMut(&str, &Tensor) -> Result<L, Fail>,
            ) -> Result<Self::With<L>, Fail> {
                Ok(($(with_field(path, stringify!($n), |p| self.$n.map(p, f))?,)*))
            }
            fn visit_leaves<'a, L>(
                tree: &'a Self::With<L>,
                path: &mut String,
                f: &mut dyn FnMut(&str, &'a L),
            ) {
                $(with_field(path, stringify!($n), |p| $t::visit_leaves(&tree.$n, p, f));)*
            }
        }
    };
}
tuple!(0 A);
tuple!(0 A, 1 B);
tuple!(0 A, 1 B, 2 C);
tuple!(0 A, 1 B, 2 C, 3 D);
tuple!(0 A, 1 B, 2 C, 3 D, 4 E);
tuple!(0 A, 1 B, 2 C, 3 D, 4 E, 5 F);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Module, Shape, Tensor};

    #[derive(Module, Clone)]
    struct Mlp {
        gate: Tensor,
        up: Tensor,
    }

    #[derive(Module, Clone)]
    struct Block {
        #[module(rename = "attn_norm")]
        norm: Tensor,
        #[module(prefix = "ffn_")]
        mlp: Mlp,
        #[module(prefix = "")]
        inner: Mlp,
        #[module(prefix = "x_")]
        leaf: Tensor,
        n_heads: i64,
    }

    fn block() -> Block {
        let t = Tensor::param(Shape::new(DType::F32, &[2]));
        Block {
            norm: t,
            mlp: Mlp { gate: t, up: t },
            inner: Mlp { gate: t, up: t },
            leaf: t,
            n_heads: 3,
        }
    }

    #[test]
    fn renames_and_prefixes_make_checkpoint_names() {
        let layers = vec![block(), block()];
        let names: Vec<String> = tensors(&layers).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            names[..6],
            [
                "0.attn_norm",
                "0.ffn_gate",
                "0.ffn_up",
                "0.gate",
                "0.up",
                "0.x_"
            ]
        );
        assert_eq!(names.len(), 12);
        assert_eq!(names[11], "1.x_");
    }

    #[test]
    fn the_twin_has_the_same_paths_and_plain_fields() {
        let b = block();
        let mut n = 0;
        let twin: <Block as Module>::With<usize> = b
            .map::<usize, Infallible>(&mut String::new(), &mut |_, _| {
                n += 1;
                Ok(n)
            })
            .unwrap();
        assert_eq!((twin.mlp.up, twin.leaf, twin.n_heads), (3, 6, 3));
        let mut paths = vec![];
        Block::visit_leaves(&twin, &mut String::new(), &mut |p, &i| {
            paths.push(format!("{p}={i}"))
        });
        assert_eq!(
            paths,
            [
                "attn_norm=1",
                "ffn_gate=2",
                "ffn_up=3",
                "gate=4",
                "up=5",
                "x_=6"
            ]
        );
        let shapes: Shapes<Block> = shapes(&b);
        assert_eq!(shapes.inner.gate.dims(), [2]);
    }
}
