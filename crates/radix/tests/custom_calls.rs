//! Custom calls: Rust kernels inside compiled programs, checked against the
//! same programs written with ops, through the plugin and the reference
//! interpreter.

mod kernels;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use kernels::{ADD_ONE_IN_PLACE, FAILS, PANICS, matmul, softsign};
use radix::custom_call::{AttrValue, Attrs, CustomCall, CustomCallMode};
use radix::host_callback::set_print_sink;
use radix::testing::{Tol, check, platform, run, trace_fn};
use radix::{Buffer, CacheMode, CompileConfig, DType, Error, Literal, Shape, Tensor};

/// `n` values spread over `[-3, 3)`, deterministic.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
        })
        .collect()
}

/// Compiles `f` with `config`'s custom-call mode and runs it on `inputs`.
fn run_with(
    mode: CustomCallMode,
    inputs: &[Literal],
    f: impl FnOnce(&[Tensor]) -> Tensor,
) -> radix::Result<(String, Vec<f64>)> {
    let platform = platform();
    let program = trace_fn(inputs, |x| f(x))?;
    let mut config = CompileConfig::new(&platform);
    config.cache = CacheMode::Disabled;
    config.custom_calls = mode;
    let exe = radix::compile_program_with(&platform, program, &config)?;
    let bufs: Vec<Buffer> = inputs
        .iter()
        .map(|l| Buffer::from_literal(&platform, l).unwrap())
        .collect();
    let refs: Vec<&Buffer> = bufs.iter().collect();
    let out = exe.call(&refs)?.remove(0).to_literal()?;
    Ok((exe.program().stablehlo(), out.data().to_vec()))
}

#[test]
fn an_elementwise_custom_call_equals_the_ops() {
    let x = Literal::from_slice(&values(40, 1), &[5, 8]);
    let want = run(std::slice::from_ref(&x), |x| x[0] / (x[0].abs() + 1.0)).unwrap();
    let program = trace_fn(std::slice::from_ref(&x), |x| softsign(x[0])).unwrap();
    let text = program.stablehlo_without_locations();
    assert!(
        text.contains(
            r#""stablehlo.custom_call"(%arg0) {api_version = 4 : i32, backend_config = {radix.name = "radix_test.softsign"}, call_target_name = "radix_test.softsign", has_side_effect = false}"#
        ),
        "{text}"
    );
    check(&[x], |x| softsign(x[0]), want[0].data(), Tol::F32);
}

#[test]
fn a_matmul_custom_call_equals_dot_on_two_threads() {
    let a = Literal::from_slice(&values(70 * 48, 2), &[70, 48]);
    let b = Literal::from_slice(&values(48 * 33, 3), &[48, 33]);
    let inputs = [a, b];
    let want = run(&inputs, |x| x[0].matmul(x[1])).unwrap();
    for threads in [1, 2, 4] {
        check(
            &inputs,
            |x| matmul(x[0], x[1], threads),
            want[0].data(),
            Tol::F32_LOOSE,
        );
    }
}

/// Records the attributes it receives (compiled and interpreted).
static SEEN: Mutex<Vec<Attrs>> = Mutex::new(Vec::new());
static ECHO: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder(
        "radix_test.echo_attrs",
        1,
        |s, _| Ok(vec![s[0]]),
        |k| {
            SEEN.lock().unwrap().push(k.attrs().clone());
            k.output::<f32>(0)?.copy_from_slice(k.input::<f32>(0)?);
            Ok(())
        },
    )
    .register()
    .unwrap()
});

#[test]
fn attributes_of_each_type_arrive_intact() {
    let attrs = Attrs::new()
        .with("flag", true)
        .with("off", false)
        .with("i", -123_456i32)
        .with("l", -(1i64 << 50) - 7)
        .with("x", 0.1f32)
        .with("tiny", f32::MIN_POSITIVE)
        .with("inf", f32::INFINITY)
        .with("d", std::f64::consts::E)
        .with("s", "quote \" backslash \\ newline \n ünï")
        .with("empty", "")
        .with("is", vec![1i32, -2, i32::MAX])
        .with("ls", vec![i64::MIN, 0, 42])
        .with("xs", vec![0.1f32, -1e-7, 3.5e20])
        .with("ds", vec![std::f64::consts::PI, -0.0, 1e-300])
        .with("none", Vec::<i64>::new());
    let x = Literal::from_slice(&[1f32, 2., 3.], &[3]);
    let a = attrs.clone();
    check(
        &[x],
        move |x| ECHO.call(&[x[0]], &a)[0],
        &[1., 2., 3.],
        Tol::EXACT,
    );
    let seen = SEEN.lock().unwrap();
    // The interpreter's and the plugin's.
    assert_eq!(seen.len(), 2);
    for got in seen.iter() {
        assert_eq!(got, &attrs);
    }
    assert_eq!(
        seen[0].get("ds"),
        Some(&AttrValue::F64s(vec![std::f64::consts::PI, -0.0, 1e-300]))
    );
}

#[test]
fn a_kernel_error_and_a_panic_come_back_from_call() {
    let platform = platform();
    let shape = Shape::new(DType::F32, &[3]);
    let x = Buffer::from_slice(&platform, &[1f32, 2., 3.], shape).unwrap();
    for (call, msg) in [
        (&*FAILS, "the kernel refuses 1 inputs"),
        (&*PANICS, "the kernel panicked on purpose"),
    ] {
        let exe = radix::compile_fn(&platform, &Tensor::param(shape), |x| {
            call.call(&[x], &Attrs::new())[0]
        })
        .unwrap();
        let err = exe
            .executable()
            .call(&[&x])
            .and_then(|out| out[0].to_vec::<f32>())
            .unwrap_err();
        assert!(err.to_string().contains(msg), "{err}");
    }
    // The process goes on: a good call still works.
    let exe = radix::compile_fn(&platform, &Tensor::param(shape), softsign).unwrap();
    assert_eq!(
        exe.executable().call(&[&x]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap()[0],
        0.5
    );
}

#[test]
fn an_aliased_output_lives_in_the_donated_input() {
    let platform = platform();
    let shape = Shape::new(DType::F32, &[4]);
    let program = radix::trace_fn(&Tensor::param(shape), |x| {
        ADD_ONE_IN_PLACE.call(&[x], &Attrs::new())[0].reuse_buffer(x)
    })
    .unwrap();
    let text = program.stablehlo_without_locations();
    assert!(text.contains("tf.aliasing_output = 0 : i32"), "{text}");
    assert!(
        text.contains("output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>]"),
        "{text}"
    );
    let x_lit = Literal::from_slice(&[1f32, 2., 3., 4.], &[4]);
    assert_eq!(
        program.interpret(std::slice::from_ref(&x_lit))[0].data(),
        &[2., 3., 4., 5.]
    );
    let exe = radix::compile_program(&platform, program).unwrap();
    let x = Buffer::from_literal(&platform, &x_lit).unwrap();
    let y = exe.call(&[&x]).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [2., 3., 4., 5.]);
    assert!(x.raw().is_deleted().unwrap(), "the input was donated");
    let err = exe.call(&[&x]).unwrap_err();
    assert!(matches!(err, Error::Donated { index: 0, .. }), "{err}");
    // Without donation the plugin copies: the input survives.
    let exe = radix::compile_fn(&platform, &Tensor::param(shape), |x| {
        ADD_ONE_IN_PLACE.call(&[x], &Attrs::new())[0]
    })
    .unwrap();
    let x = Buffer::from_literal(&platform, &x_lit).unwrap();
    assert_eq!(
        exe.executable().call(&[&x]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        [2., 3., 4., 5.]
    );
    assert_eq!(x.to_vec::<f32>().unwrap(), [1., 2., 3., 4.]);
}

static RUNS: AtomicUsize = AtomicUsize::new(0);
static COUNTED: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder(
        "radix_test.counted",
        1,
        |s, _| Ok(vec![s[0]]),
        |k| {
            RUNS.fetch_add(1, Ordering::SeqCst);
            for (y, x) in k.output::<f32>(0)?.iter_mut().zip(k.input::<f32>(0)?) {
                *y = x * 2.0;
            }
            Ok(())
        },
    )
    .side_effect()
    .register()
    .unwrap()
});

#[test]
fn a_custom_call_inside_while_runs_once_per_iteration() {
    let x = Literal::from_slice(&[1f32, -1.], &[2]);
    let f = |x: &[Tensor]| {
        let (state, _) = radix::for_(5, "step", &[x[0]], |_, s| {
            (vec![COUNTED.call(&[s[0]], &Attrs::new())[0]], vec![])
        });
        state[0]
    };
    let program = trace_fn(std::slice::from_ref(&x), f).unwrap();
    let before = RUNS.load(Ordering::SeqCst);
    assert_eq!(
        program.interpret(std::slice::from_ref(&x))[0].data(),
        &[32., -32.]
    );
    assert_eq!(RUNS.load(Ordering::SeqCst) - before, 5);
    let got = radix::testing::run_program(program, std::slice::from_ref(&x)).unwrap();
    assert_eq!(got[0].data(), &[32., -32.]);
    assert_eq!(RUNS.load(Ordering::SeqCst) - before, 10);
    // A side effect whose result nothing uses still runs, once per place.
    let before = RUNS.load(Ordering::SeqCst);
    let got = run(std::slice::from_ref(&x), |x| {
        COUNTED.call(&[x[0]], &Attrs::new());
        COUNTED.call(&[x[0]], &Attrs::new());
        x[0] + 1.0
    })
    .unwrap();
    assert_eq!(got[0].data(), &[2., 0.]);
    assert_eq!(RUNS.load(Ordering::SeqCst) - before, 2);
}

fn declare_twice(version: u32) -> radix::Result<CustomCall> {
    CustomCall::builder(
        "radix_test.twice",
        version,
        |s, _| Ok(vec![s[0]]),
        |k| {
            k.output::<f32>(0)?.copy_from_slice(k.input::<f32>(0)?);
            Ok(())
        },
    )
    .register()
}

#[test]
fn the_same_name_with_other_semantics_is_refused() {
    let first = declare_twice(1).unwrap();
    let again = declare_twice(1).unwrap();
    assert_eq!(format!("{first:?}"), format!("{again:?}"));
    let err = declare_twice(2).unwrap_err();
    assert!(
        matches!(&err, Error::CustomCall { name, reason } if name == "radix_test.twice" && reason.contains("version 1 vs 2")),
        "{err}"
    );
    // Another kernel under the same name and version.
    let err = CustomCall::builder("radix_test.twice", 1, |s, _| Ok(vec![s[0]]), |_| Ok(()))
        .register()
        .unwrap_err();
    assert!(err.to_string().contains("other functions"), "{err}");
}

#[test]
fn forced_fallbacks_compile_the_ops_instead() {
    let x = Literal::from_slice(&values(12, 4), &[12]);
    let inputs = std::slice::from_ref(&x);
    let (native_text, native) =
        run_with(CustomCallMode::Native, inputs, |x| softsign(x[0])).unwrap();
    let (text, fallback) = run_with(CustomCallMode::Fallback, inputs, |x| softsign(x[0])).unwrap();
    assert!(
        native_text.contains("stablehlo.custom_call"),
        "{native_text}"
    );
    assert!(!text.contains("stablehlo.custom_call"), "{text}");
    assert!(
        text.contains("callee = @radix_test_softsign_fallback_"),
        "{text}"
    );
    radix::testing::compare(&fallback, &native, Tol::F32).unwrap();
    // Nested in a loop too.
    let (text, _) = run_with(CustomCallMode::Fallback, inputs, |x| {
        radix::for_(2, "i", &[x[0]], |_, s| (vec![softsign(s[0])], vec![])).0[0]
    })
    .unwrap();
    assert!(!text.contains("stablehlo.custom_call"), "{text}");
}

#[test]
fn a_call_without_fallback_names_itself_and_the_platform() {
    let x = Literal::from_slice(&[1f32], &[1]);
    let err = run_with(CustomCallMode::Fallback, &[x], |x| {
        FAILS.call(&[x[0]], &Attrs::new())[0]
    })
    .unwrap_err();
    let msg = err.to_string();
    let platform_name = platform().client().platform_name().to_string();
    assert!(
        matches!(&err, Error::CustomCall { name, .. } if name == "radix_test.fails"),
        "{msg}"
    );
    assert!(
        msg.contains(&platform_name) && msg.contains("no fallback"),
        "{msg}"
    );
}

#[test]
fn misuses_are_trace_errors_at_the_callers_line() {
    let x = Literal::from_slice(&[1i32, 2], &[2]);
    let err = trace_fn(std::slice::from_ref(&x), |x| softsign(x[0])).unwrap_err();
    assert!(
        err.to_string()
            .contains("radix_test.softsign: wants one f32 tensor"),
        "{err}"
    );
    let y = Literal::from_slice(&[1f32, 2.], &[2]);
    let err = trace_fn(&[y], |x| {
        ECHO.call(&[x[0]], &Attrs::new().with("radix.name", "x"))[0]
    })
    .unwrap_err();
    assert!(err.to_string().contains("reserved prefix"), "{err}");
}

/// The executable cache key of a program using `radix_test.versioned` at
/// `version` (each version needs its own process: a name has one
/// declaration per process); run only by
/// `the_cache_key_changes_with_the_kernel_version`.
#[test]
#[ignore = "a child process of the_cache_key_changes_with_the_kernel_version"]
fn cache_key_child() {
    let version = std::env::var("RADIX_TEST_KERNEL_VERSION").expect("run by its parent");
    let call = CustomCall::builder(
        "radix_test.versioned",
        version.parse().unwrap(),
        |s, _| Ok(vec![s[0]]),
        |k| {
            k.output::<f32>(0)?.copy_from_slice(k.input::<f32>(0)?);
            Ok(())
        },
    )
    .register()
    .unwrap();
    let platform = platform();
    let x = Tensor::param(Shape::new(DType::F32, &[2]));
    let program = radix::trace_fn(&x, |x| call.call(&[x], &Attrs::new())[0]).unwrap();
    let key = radix::cache_key(&platform, &program, &CompileConfig::new(&platform)).unwrap();
    println!("KEY={key}");
}

#[test]
fn the_cache_key_changes_with_the_kernel_version() {
    let key = |version: &str| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cache_key_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("RADIX_TEST_KERNEL_VERSION", version)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.split_once("KEY=").map(|(_, k)| k[..16].to_string()))
            .unwrap_or_else(|| panic!("no key in {text}"))
    };
    let (one, again, two) = (key("1"), key("1"), key("2"));
    assert_eq!(one, again);
    assert_ne!(one, two);
}

#[test]
fn print_inside_a_loop_prints_each_step_in_order() {
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = lines.clone();
    set_print_sink(Some(Arc::new(move |l: &str| {
        sink.lock().unwrap().push(l.to_string())
    })));
    let x = Literal::from_slice(&[1f32, 2., 3.], &[3]);
    let line = line!() + 3;
    let program = trace_fn(std::slice::from_ref(&x), |x| {
        radix::for_(3, "step", &[x[0]], |_, s| {
            let y = (s[0] * 2.0).print("y");
            (vec![y], vec![])
        })
        .0[0]
    })
    .unwrap();
    let got = radix::testing::run_program(program.clone(), std::slice::from_ref(&x)).unwrap();
    assert_eq!(got[0].data(), &[8., 16., 24.]);
    let compiled: Vec<String> = std::mem::take(&mut *lines.lock().unwrap());
    program.interpret(std::slice::from_ref(&x));
    let interpreted: Vec<String> = std::mem::take(&mut *lines.lock().unwrap());
    set_print_sink(None);
    let at = format!("{}:{line}: y = {{3, f32}}", file!());
    let want = [
        format!("{at} [2, 4, 6]"),
        format!("{at} [4, 8, 12]"),
        format!("{at} [8, 16, 24]"),
    ];
    assert_eq!(compiled, want);
    assert_eq!(interpreted, want);
}

/// Runs 8 tasks on up to `workers` threads and counts the threads that ran
/// them. No task finishes before `workers` threads have each started one
/// (a rendezvous, not a sleep), so a pool that hands out the threads runs
/// on all of them whatever the timing; [`RENDEZVOUS`] after the call began
/// the tasks go on without them (all of them: the deadline is the call's,
/// not each task's), and the count shows how many came.
static THREADS_SEEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());
const RENDEZVOUS: std::time::Duration = std::time::Duration::from_secs(30);
static MEET: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder(
        "radix_test.rendezvous",
        1,
        |s, _| Ok(vec![s[0]]),
        |k| {
            let workers = k.attrs().i64("workers")? as usize;
            let ids: Mutex<Vec<std::thread::ThreadId>> = Mutex::default();
            let arrived = std::sync::Condvar::new();
            let start = std::time::Instant::now();
            k.parallel_for(8, workers, &|_| {
                let me = std::thread::current().id();
                let mut seen = ids.lock().unwrap();
                seen.push(me);
                arrived.notify_all();
                let distinct = |v: &[std::thread::ThreadId]| {
                    let mut v = v.to_vec();
                    v.sort_by_key(|id| format!("{id:?}"));
                    v.dedup();
                    v.len()
                };
                while distinct(&seen) < workers && start.elapsed() < RENDEZVOUS {
                    seen = arrived
                        .wait_timeout(seen, RENDEZVOUS.saturating_sub(start.elapsed()))
                        .unwrap()
                        .0;
                }
            })?;
            let mut ids = ids.into_inner().unwrap();
            assert_eq!(ids.len(), 8, "every task ran once");
            ids.sort_by_key(|id| format!("{id:?}"));
            ids.dedup();
            THREADS_SEEN.lock().unwrap().push(ids.len());
            k.output::<f32>(0)?.copy_from_slice(k.input::<f32>(0)?);
            Ok(())
        },
    )
    .register()
    .unwrap()
});

#[test]
fn kernels_split_work_over_the_plugins_threads() {
    let platform = platform();
    let shape = Shape::new(DType::F32, &[1]);
    let x = Buffer::from_slice(&platform, &[1f32], shape).unwrap();
    for workers in [1i64, 2] {
        let exe = radix::compile_fn(&platform, &Tensor::param(shape), |x| {
            MEET.call(&[x], &Attrs::new().with("workers", workers))[0]
        })
        .unwrap();
        exe.executable().call(&[&x]).unwrap();
        let seen = THREADS_SEEN.lock().unwrap().pop();
        assert_eq!(
            seen,
            Some(workers as usize),
            "parallel_for with up to {workers} workers: the 8 tasks ran on this many threads"
        );
    }
}
