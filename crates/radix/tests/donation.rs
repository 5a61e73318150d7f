//! Donation: `reuse_buffer` and inputs returned unchanged alias arguments to
//! outputs; a donated buffer is consumed by the call.

use expect_test::{Expect, expect};
use radix::testing::platform;
use radix::{Buffer, DType, Error, Shape, Tensor};

fn cache_shape() -> Shape {
    Shape::tagged(DType::F32, &[("s", 4), ("d", 2)])
}

fn row_shape() -> Shape {
    Shape::tagged(DType::F32, &[("s", 1), ("d", 2)])
}

/// Appends `row` at position `pos` of `cache`, in place.
fn update(cache: Tensor, row: Tensor, pos: Tensor) -> Tensor {
    let zero = Tensor::scalar(0.0, DType::I32);
    cache
        .dynamic_update_slice(row, &[pos, zero])
        .reuse_buffer(cache)
}

/// Checks the signature line of `@main` traced from `f` over `(cache, row, pos)`.
fn check(f: impl FnOnce(Tensor, Tensor, Tensor) -> Vec<Tensor>, want: Expect) {
    let inputs = (
        Tensor::param(cache_shape()),
        Tensor::param(row_shape()),
        Tensor::param(Shape::scalar(DType::I32)),
    );
    let program = radix::trace_fn(&inputs, |(c, r, p)| f(c, r, p)).unwrap();
    let text = program.optimize().stablehlo_without_locations();
    let main = text.lines().find(|l| l.contains("@main")).unwrap();
    want.assert_eq(main.trim());
}

#[test]
fn reuse_buffer_and_returned_inputs_alias() {
    check(
        |c, r, p| vec![update(c, r, p)],
        expect![[
            r#"func.func @main(%arg0: tensor<4x2xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<1x2xf32>, %arg2: tensor<i32>) -> (tensor<4x2xf32>) {"#
        ]],
    );
    // An input returned unchanged aliases its output; the second result is new.
    check(
        |c, r, _| vec![r * 2.0, c],
        expect![[
            r#"func.func @main(%arg0: tensor<4x2xf32> {tf.aliasing_output = 1 : i32}, %arg1: tensor<1x2xf32>, %arg2: tensor<i32>) -> (tensor<1x2xf32>, tensor<4x2xf32>) {"#
        ]],
    );
}

#[test]
fn bad_donations_are_errors() {
    let inputs = (Tensor::param(cache_shape()), Tensor::param(row_shape()));
    let err = radix::trace_fn(&inputs, |(c, _)| {
        vec![(c * 2.0).reuse_buffer(c), (c + 1.0).reuse_buffer(c)]
    })
    .unwrap_err();
    expect!["reuse_buffer: argument 0 is donated twice (shapes: {s=4, d=2, f32}, {s=4, d=2, f32})"]
        .assert_eq(&without_location(&err));
    let err = radix::trace_fn(&inputs, |(c, r)| r.reuse_buffer(c)).unwrap_err();
    expect!["reuse_buffer: {s=1, d=2, f32} cannot reuse the buffer of {s=4, d=2, f32} (shapes: {s=1, d=2, f32}, {s=4, d=2, f32})"]
        .assert_eq(&without_location(&err));
    let err = radix::trace_fn(&inputs, |(c, _)| c.reuse_buffer(c * 2.0)).unwrap_err();
    expect!["reuse_buffer: only an argument's buffer can be reused (shapes: {s=4, d=2, f32}, {s=4, d=2, f32})"]
        .assert_eq(&without_location(&err));
    // The error names the user's line.
    let e = err.as_trace().unwrap();
    assert!(e.file.ends_with("donation.rs"), "{}", e.file);
}

fn without_location(e: &Error) -> String {
    let s = e.to_string();
    s.splitn(4, ':').nth(3).unwrap().trim().to_string()
}

#[test]
fn a_donated_buffer_is_consumed() {
    let platform = platform();
    let inputs = (
        Tensor::param(cache_shape()),
        Tensor::param(row_shape()),
        Tensor::param(Shape::scalar(DType::I32)),
    );
    let exe = radix::compile_fn(&platform, &inputs, |(c, r, p)| update(c, r, p)).unwrap();
    let cache = Buffer::from_slice(&platform, &[0f32; 8], cache_shape()).unwrap();
    let row = Buffer::from_slice(&platform, &[1f32, 2.], row_shape()).unwrap();
    let pos = Buffer::from_slice(&platform, &[2i32], Shape::scalar(DType::I32)).unwrap();
    // The call takes its inputs by value; these clones share the buffers.
    let out = exe
        .call_fn((cache.clone(), row.clone(), pos.clone()))
        .unwrap();
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        [0., 0., 0., 0., 1., 2., 0., 0.]
    );
    // The row and position were not donated; the cache was.
    assert!(row.to_vec::<f32>().is_ok());
    assert!(cache.to_vec::<f32>().is_err());
    let err = exe.call_fn((cache, row, pos)).unwrap_err();
    expect!["argument 0 (input.0): the buffer was donated to an earlier call"]
        .assert_eq(&err.to_string());
}

/// The resident set size of this process in bytes (Linux `/proc/self/statm`).
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn a_donated_state_fed_back_keeps_memory_flat() {
    // A 4 MiB "KV cache" updated in place for 1,000 steps. Without donation
    // each step would keep a fresh 4 MiB output alive while the caller holds
    // the old one; with it, the output lives in the input's memory.
    let platform = platform();
    let (n_s, n_d) = (1024, 1024);
    let cache_shape = Shape::tagged(DType::F32, &[("s", n_s), ("d", n_d)]);
    let row_shape = Shape::tagged(DType::F32, &[("s", 1), ("d", n_d)]);
    let inputs = (
        Tensor::param(cache_shape),
        Tensor::param(row_shape),
        Tensor::param(Shape::scalar(DType::I32)),
    );
    let exe = radix::compile_fn(&platform, &inputs, |(c, r, p)| update(c, r, p)).unwrap();
    let mut cache =
        Buffer::from_slice(&platform, &vec![0f32; (n_s * n_d) as usize], cache_shape).unwrap();
    let row = Buffer::from_slice(&platform, &vec![1f32; n_d as usize], row_shape).unwrap();
    let mut rss = vec![];
    let address = cache.raw().device_address().unwrap();
    for step in 0..1000 {
        if step == 10 {
            rss.push(rss_bytes());
        }
        let pos =
            Buffer::from_slice(&platform, &[step % n_s as i32], Shape::scalar(DType::I32)).unwrap();
        let old = cache.clone();
        cache = exe.call_fn((cache, row.clone(), pos)).unwrap();
        assert!(old.raw().is_deleted().unwrap(), "step {step}");
        // The output lives in the donated input's memory: without donation
        // it would be a fresh buffer (and RSS alone would not show it, the
        // old one being freed each step).
        assert_eq!(
            cache.raw().device_address().unwrap(),
            address,
            "step {step}"
        );
    }
    rss.push(rss_bytes());
    let grown = rss[1] as i64 - rss[0] as i64;
    eprintln!(
        "RSS after step 10: {} KiB, after step 1000: {} KiB, growth {} KiB",
        rss[0] / 1024,
        rss[1] / 1024,
        grown / 1024
    );
    // 990 leaked 4 MiB buffers would be ~3.9 GiB; allow 64 MiB of noise.
    assert!(grown < 64 << 20, "RSS grew by {grown} bytes");
    let sum: f32 = cache.to_vec::<f32>().unwrap().iter().sum();
    assert_eq!(sum, (1000 * n_d) as f32);
}
