//! Host callbacks: Rust closures called with the values of tensors while
//! a compiled program runs (inside loops too), and [`Tensor::print`] built
//! on them. One side-effecting custom call, `radix.host_callback`, carries
//! the closure's key (`name@file:line:col`) as an attribute; its kernel
//! finds the closure in a process-wide table, calls it with the inputs as
//! [`Literal`]s and passes the inputs through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::custom_call::{Attrs, CustomCall};
use crate::{Literal, Tensor};

/// Host callbacks by key (`name@file:line:col`).
type Callback = dyn Fn(&[Literal]) + Send + Sync;
static CALLBACKS: Mutex<Option<HashMap<String, Arc<Callback>>>> = Mutex::new(None);

/// The custom call behind [`host_callback`].
fn host_callback_call() -> &'static CustomCall {
    static CALL: OnceLock<CustomCall> = OnceLock::new();
    CALL.get_or_init(|| {
        CustomCall::builder(
            "radix.host_callback",
            1,
            |shapes, _| Ok(shapes.to_vec()),
            |k| {
                let key = k.attrs().str("callback")?;
                let f = CALLBACKS
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .and_then(|m| m.get(key).cloned())
                    .ok_or_else(|| format!("no host callback {key} in this process"))?;
                let mut values = Vec::with_capacity(k.n_inputs());
                for (v, o) in k.inputs().iter().zip(k.outputs()) {
                    let len = v.shape.count() * v.shape.dtype().size_in_bytes();
                    // SAFETY: an input and its output hold `len` bytes each and
                    // are distinct buffers.
                    let bytes = unsafe {
                        std::ptr::copy_nonoverlapping(v.ptr, o.ptr, len);
                        std::slice::from_raw_parts(v.ptr, len)
                    };
                    values.push(Literal::from_bytes(v.shape, bytes));
                }
                f(&values);
                Ok(())
            },
        )
        .side_effect()
        .register()
        .expect("radix.host_callback is declared once")
    })
}

/// Calls `f` on the host with the values of `inputs` each time the program
/// reaches this point (inside loops, once per iteration), also in the
/// reference interpreter; returns `inputs` unchanged, which a caller may
/// use to order later work after the callback. A side-effecting custom
/// call: XLA neither drops it nor merges it. `name` and the caller's line
/// identify the callback: tracing the same place with the same name again
/// replaces `f`. Not for programs partitioned over a mesh.
#[track_caller]
pub fn host_callback(
    name: &str,
    inputs: &[Tensor],
    f: impl Fn(&[Literal]) + Send + Sync + 'static,
) -> Vec<Tensor> {
    let loc = std::panic::Location::caller();
    let key = format!("{name}@{}:{}:{}", loc.file(), loc.line(), loc.column());
    CALLBACKS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key.clone(), Arc::new(f));
    host_callback_call().call(inputs, &Attrs::new().with("callback", key))
}

/// Where [`Tensor::print`] writes its lines.
type Sink = dyn Fn(&str) + Send + Sync;
static SINK: Mutex<Option<Arc<Sink>>> = Mutex::new(None);

/// Sends the lines of [`Tensor::print`] to `sink` (one call per line,
/// without the newline) instead of standard error; `None` restores
/// standard error.
pub fn set_print_sink(sink: Option<Arc<Sink>>) {
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = sink;
}

impl Tensor {
    /// Prints `file:line: label = shape [values]` (the first 16 values)
    /// each time the compiled program reaches this point, loops included;
    /// returns the tensor unchanged. See [`host_callback`] and
    /// [`set_print_sink`].
    #[track_caller]
    pub fn print(self, label: &str) -> Tensor {
        let loc = std::panic::Location::caller();
        let head = format!("{}:{}: {label} =", loc.file(), loc.line());
        host_callback(label, &[self], move |values| {
            let v = &values[0];
            let mut line = format!("{head} {} [", v.shape());
            for (i, x) in v.data().iter().take(16).enumerate() {
                if i > 0 {
                    line.push_str(", ");
                }
                line.push_str(&x.to_string());
            }
            if v.data().len() > 16 {
                line.push_str(", ...");
            }
            line.push(']');
            let sink = SINK.lock().unwrap_or_else(|e| e.into_inner()).clone();
            match sink {
                Some(s) => s(&line),
                None => eprintln!("{line}"),
            }
        })[0]
    }
}
