//! Rust handlers registered through the plugin's FFI extension, run from
//! hand-written `stablehlo.custom_call`s.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{compile, f32_buffer, f32_values, run};
use radix_pjrt::ExecuteOptions;
use radix_pjrt::custom_call::{AttrValue, CallFrame, Handler, parallel_for, register_handler};

/// A program applying custom call `name` to a `tensor<4xf32>` with the
/// extra `attrs` (MLIR attribute text).
fn program(name: &str, attrs: &str) -> String {
    format!(
        r#"func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {{
  %0 = "stablehlo.custom_call"(%a) {{api_version = 4 : i32, call_target_name = "{name}", backend_config = {{radix.name = "{name}"{attrs}}}, has_side_effect = false}} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}}"#
    )
}

fn register(name: &str, h: impl Fn(&CallFrame<'_>) -> Result<(), String> + Send + Sync + 'static) {
    let h: Arc<Handler> = Arc::new(h);
    register_handler(&common::cpu_plugin(), name, "Host", h).expect("registered");
}

/// Reads operand 0 and writes `f(x)` to result 0 (both 4 f32s).
fn map(frame: &CallFrame<'_>, f: impl Fn(f32) -> f32) -> Result<(), String> {
    let (a, r) = (frame.arg(0)?, frame.ret(0)?);
    // SAFETY: both buffers hold 4 f32s of host memory (CPU plugin) and are
    // distinct.
    let (x, y) = unsafe {
        (
            std::slice::from_raw_parts(a.data().cast::<f32>(), 4),
            std::slice::from_raw_parts_mut(r.data().cast::<f32>(), 4),
        )
    };
    for (y, x) in y.iter_mut().zip(x) {
        *y = f(*x);
    }
    Ok(())
}

#[test]
fn the_cpu_plugin_has_the_ffi_extension() {
    assert!(common::cpu_plugin().ffi_extension().is_ok());
}

#[test]
fn a_rust_handler_runs_inside_the_program() {
    register("pjrt_test.double", |f| {
        assert_eq!(f.arg(0)?.dims(), &[4]);
        map(f, |x| 2.0 * x)
    });
    let client = common::cpu_client(1);
    let exe = compile(&client, &program("pjrt_test.double", ""));
    let a = f32_buffer(&client, &[1., 2., 3., -4.], &[4]);
    assert_eq!(f32_values(&run(&exe, &[&a])[0]), [2., 4., 6., -8.]);
}

#[test]
fn attributes_arrive_decoded() {
    let seen: Arc<Mutex<Vec<(String, AttrValue)>>> = Arc::default();
    let s = seen.clone();
    register("pjrt_test.attrs", move |f| {
        *s.lock().unwrap() = f.attrs()?;
        map(f, |x| x)
    });
    let client = common::cpu_client(1);
    let attrs = ", b = true, i = -7 : i32, l = 1099511627776 : i64, \
                 x = 0x3FC00000 : f32, d = 0x400921FB54442D18 : f64, s = \"hi\", \
                 li = array<i64: 1, -2>, lf = array<f32: 0.5, 2.0>";
    let exe = compile(&client, &program("pjrt_test.attrs", attrs));
    let a = f32_buffer(&client, &[1., 2., 3., 4.], &[4]);
    run(&exe, &[&a]);
    let got = seen.lock().unwrap().clone();
    let get = |n: &str| got.iter().find(|a| a.0 == n).map(|a| a.1.clone());
    assert_eq!(get("b"), Some(AttrValue::Bool(true)));
    assert_eq!(get("i"), Some(AttrValue::I32(-7)));
    assert_eq!(get("l"), Some(AttrValue::I64(1 << 40)));
    assert_eq!(get("x"), Some(AttrValue::F32(1.5)));
    assert_eq!(get("d"), Some(AttrValue::F64(std::f64::consts::PI)));
    assert_eq!(get("s"), Some(AttrValue::Str("hi".into())));
    assert_eq!(get("li"), Some(AttrValue::I64s(vec![1, -2])));
    assert_eq!(get("lf"), Some(AttrValue::F32s(vec![0.5, 2.0])));
}

#[test]
fn an_error_or_a_panic_comes_back_from_execute() {
    register("pjrt_test.fails", |_| Err("the handler says no".into()));
    register("pjrt_test.panics", |_| panic!("the handler panicked here"));
    let client = common::cpu_client(1);
    let a = f32_buffer(&client, &[1., 2., 3., 4.], &[4]);
    for (name, msg) in [
        ("pjrt_test.fails", "the handler says no"),
        ("pjrt_test.panics", "the handler panicked here"),
    ] {
        let exe = compile(&client, &program(name, ""));
        let err = match exe.execute(&[[&a]], &ExecuteOptions::default()) {
            Ok(out) => out[0][0].to_host_vec().map(|_| ()).unwrap_err(),
            Err(e) => e,
        };
        assert!(err.to_string().contains(msg), "{err}");
    }
}

#[test]
fn a_second_handler_for_a_name_is_refused() {
    register("pjrt_test.once", |f| map(f, |x| x));
    let other: Arc<Handler> = Arc::new(|f: &CallFrame<'_>| map(f, |x| x + 1.0));
    let err = register_handler(&common::cpu_plugin(), "pjrt_test.once", "Host", other);
    assert!(err.unwrap_err().to_string().contains("pjrt_test.once"));
}

#[test]
fn handlers_split_work_over_the_thread_pool() {
    let threads = Arc::new(AtomicUsize::new(0));
    let t = threads.clone();
    register("pjrt_test.pool", move |f| {
        let pool = f.thread_pool().ok_or("no thread pool")?;
        t.store(pool.n_threads(), Ordering::SeqCst);
        let hits: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
        parallel_for(Some(&pool), hits.len(), 4, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        })?;
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        parallel_for(Some(&pool), 8, 4, &|i| assert!(i != 5, "task 5 fails"))?;
        map(f, |x| x)
    });
    let client = common::cpu_client(1);
    let exe = compile(&client, &program("pjrt_test.pool", ""));
    let a = f32_buffer(&client, &[1., 2., 3., 4.], &[4]);
    let err = match exe.execute(&[[&a]], &ExecuteOptions::default()) {
        Ok(out) => out[0][0].to_host_vec().map(|_| ()).unwrap_err(),
        Err(e) => e,
    };
    assert!(err.to_string().contains("task 5 fails"), "{err}");
    assert!(threads.load(Ordering::SeqCst) >= 1);
}
