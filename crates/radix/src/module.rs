//! Model trees: the [`Module`] trait visits every tensor of a value in one
//! fixed depth-first order with its dotted path (`layers.3.attn.q.weight`).
//! That order is the executable's argument ABI: tracing, binding and results
//! all walk it. `#[derive(Module)]` implements it for structs.

use crate::Tensor;

/// A tree of tensors: structs (via `#[derive(Module)]`), `Option`, `Vec`,
/// arrays, `Box`, tuples, and plain values holding none.
pub trait Module {
    /// Calls `f` on each tensor with its path, in declaration order.
    /// `path` holds the path to `self` and is restored before returning.
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor));
    /// Like [`Module::visit`], with mutable access.
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor));
}

/// Runs `f` with `path` extended by `.name` (no dot at the root).
pub fn with_field<R>(path: &mut String, name: &str, f: impl FnOnce(&mut String) -> R) -> R {
    let len = path.len();
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
    let res = f(path);
    path.truncate(len);
    res
}

/// The tensors of `m` with their paths, in ABI order.
pub fn tensors<M: Module + ?Sized>(m: &M) -> Vec<(String, Tensor)> {
    let mut res = vec![];
    m.visit(&mut String::new(), &mut |p, t| {
        res.push((p.to_string(), *t))
    });
    res
}

impl Module for Tensor {
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        f(path, self)
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        f(path, self)
    }
}

impl<T: Module> Module for Option<T> {
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
}

impl<T: Module + ?Sized> Module for Box<T> {
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        (**self).visit(path, f)
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        (**self).visit_mut(path, f)
    }
}

impl<T: Module> Module for [T] {
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
}

impl<T: Module> Module for Vec<T> {
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        self.as_slice().visit(path, f)
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        self.as_mut_slice().visit_mut(path, f)
    }
}

impl<T: Module, const N: usize> Module for [T; N] {
    fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
        self.as_slice().visit(path, f)
    }
    fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
        self.as_mut_slice().visit_mut(path, f)
    }
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl Module for $t {
            fn visit(&self, _: &mut String, _: &mut dyn FnMut(&str, &Tensor)) {}
            fn visit_mut(&mut self, _: &mut String, _: &mut dyn FnMut(&str, &mut Tensor)) {}
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
            fn visit(&self, path: &mut String, f: &mut dyn FnMut(&str, &Tensor)) {
                $(with_field(path, stringify!($n), |p| self.$n.visit(p, f));)*
            }
            fn visit_mut(&mut self, path: &mut String, f: &mut dyn FnMut(&str, &mut Tensor)) {
                $(with_field(path, stringify!($n), |p| self.$n.visit_mut(p, f));)*
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
