//! Control flow over nested functions: `stablehlo.while`, `stablehlo.if`
//! and `func.call` of a private `func.func`, printed with their regions and
//! evaluated by interpreting their bodies. Operands are the op's own, then
//! the values each region captures. The tracing side (`while_`, `for_`,
//! `if_`, `call`) is radix's `tensor/control.rs`.

use crate::Function;
use crate::Shape;
use crate::interp;
use crate::literal::Literal;
use crate::print::OpPrinter;
use std::sync::Arc;

/// Control flow over nested functions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Control {
    /// `stablehlo.while`: operands are the initial state, then the values
    /// `cond` captures, then those `body` captures. `max_trips` bounds the
    /// number of iterations when the bound is known when traced (`for_`
    /// runs exactly that many, `while_bounded` at most): the derivative
    /// rule sizes the saved iterations by it, and has none without it.
    While {
        /// State and captures to a bool scalar: whether to run again.
        cond: Arc<Function>,
        /// State and captures to the next state.
        body: Arc<Function>,
        /// How many operands after the state `cond` captures.
        n_cond_captures: usize,
        /// The bound on the iterations, when known.
        max_trips: Option<i64>,
    },
    /// `stablehlo.if`: operands are the predicate, then the captures of
    /// `then`, then those of `other`.
    If {
        /// The branch taken when the predicate holds, over its captures.
        then: Arc<Function>,
        /// The other branch, over its captures.
        other: Arc<Function>,
        /// How many operands after the predicate `then` captures.
        n_then_captures: usize,
    },
    /// `func.call` of the private function `@name` with body `f`. A
    /// `checkpoint`ed call's derivative saves only its arguments and runs
    /// the body again in the backward pass (`radix::checkpoint`); another
    /// saves the body's residuals.
    Call {
        /// The private function's name (`@name`).
        name: Arc<str>,
        /// Its body, hermetic.
        f: Arc<Function>,
        /// Whether its derivative runs the body again instead of saving.
        checkpoint: bool,
    },
}
/// A control-flow op's operands in three runs ([`Control::split`]).
type Split<'a, T> = (&'a [T], &'a [T], &'a [T]);

impl Control {
    /// `args` split as the op reads them: a `while`'s state, its
    /// condition's captures and its body's; an `if`'s predicate (one
    /// operand), its then-branch's captures and its else-branch's; a call's
    /// operands and nothing. Too few operands is an error.
    fn split<'a, T>(&self, args: &'a [T]) -> Result<Split<'a, T>, String> {
        let (n_head, n_first) = match self {
            Control::While {
                body,
                n_cond_captures,
                ..
            } => {
                let n = body.results.len();
                if args.len() < n + n_cond_captures {
                    return Err(format!("{} operands for a state of {n}", args.len()));
                }
                (n, *n_cond_captures)
            }
            Control::If {
                n_then_captures, ..
            } => {
                if args.len() < 1 + n_then_captures {
                    return Err(format!(
                        "{} operands for {n_then_captures} captures",
                        args.len()
                    ));
                }
                (1, *n_then_captures)
            }
            Control::Call { .. } => (args.len(), 0),
        };
        let (head, captures) = args.split_at(n_head);
        let (first, second) = captures.split_at(n_first);
        Ok((head, first, second))
    }
}

impl super::Family for Control {
    fn name(&self) -> &'static str {
        match self {
            Control::While { .. } => "while",
            Control::If { .. } => "if",
            Control::Call { .. } => "call",
        }
    }

    /// The shape rules of control flow. `while`: a condition from the state
    /// and its captures to a bool scalar, a body from the state and its
    /// captures to the state, which is the result. `if`: a bool scalar
    /// predicate, two branches of their captures giving one list of types,
    /// the result. `call`: the callee takes the operands; its results are the
    /// call's.
    fn infer(&self, args: &[Shape], _: Shape) -> Result<super::Shapes, String> {
        let bool_scalar = Shape::scalar(crate::DType::Bool);
        match self {
            Control::While { cond, body, .. } => {
                let (state, cc, bc) = self.split(args)?;
                super::signature(cond, "condition", &[state, cc].concat(), &[bool_scalar])?;
                super::signature(body, "body", &[state, bc].concat(), state)?;
                Ok(state.to_vec())
            }
            Control::If { then, other, .. } => {
                let (pred, tc, ec) = self.split(args)?;
                super::scalar(pred[0], Some(crate::DType::Bool), "the predicate")?;
                let results = then.result_shapes();
                super::signature(then, "then branch", tc, &results)?;
                super::signature(other, "else branch", ec, &results)?;
                Ok(results)
            }
            Control::Call { f, .. } => {
                let results = f.result_shapes();
                super::signature(f, "callee", args, &results)?;
                Ok(results)
            }
        }
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        let args: Vec<String> = p.arg_names().iter().map(|s| s.to_string()).collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        // The verified operands split as the op reads them.
        let Ok((_, first, second)) = self.split(&refs) else {
            return;
        };
        match self {
            Control::While { cond, body, .. } => {
                let n = body.results.len();
                let regions = [p.region(0, cond, n, first), p.region(1, body, n, second)];
                let shapes: Vec<Shape> = p.arg_shapes()[..n].to_vec();
                p.multi("stablehlo.while", n, &regions, "", &shapes);
            }
            Control::If { then, other, .. } => {
                let regions = [p.region(0, then, 0, first), p.region(1, other, 0, second)];
                p.multi("stablehlo.if", 1, &regions, "", &then.result_shapes());
            }
            Control::Call { name, f, .. } => {
                p.private_function(name, f);
                let shapes = f.result_shapes();
                let n = refs.len();
                p.multi("func.call", n, &[], &format!("callee = @{name}"), &shapes);
            }
        }
    }

    /// The results of a multi-result op.
    fn eval(&self, args: &[&Literal], _: Shape) -> Vec<Literal> {
        let owned = |xs: &[&Literal]| xs.iter().map(|&l| l.clone()).collect::<Vec<_>>();
        let Ok((head, first, second)) = self.split(args) else {
            return vec![];
        };
        match self {
            Control::While { cond, body, .. } => {
                let (cc, bc) = (first, second);
                let mut state = owned(head);
                loop {
                    let mut ca = state.clone();
                    ca.extend(owned(cc));
                    if interp::eval(cond, &ca)[0].data()[0] == 0.0 {
                        return state;
                    }
                    state.extend(owned(bc));
                    state = interp::eval(body, &state);
                }
            }
            Control::If { then, other, .. } => {
                let (tc, ec) = (first, second);
                if head[0].data()[0] != 0.0 {
                    interp::eval(then, &owned(tc))
                } else {
                    interp::eval(other, &owned(ec))
                }
            }
            Control::Call { f, .. } => interp::eval(f, &owned(args)),
        }
    }
}
