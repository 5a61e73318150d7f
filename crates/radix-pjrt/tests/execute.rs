//! Compiling and running hand-written StableHLO and checking the numbers.

mod common;

use common::{compile, f32_buffer, f32_values, i32_values, run};
use half::{bf16, f16};
use radix_pjrt::{ElementType, ExecuteOptions};

#[test]
fn add_pretty_form() {
    let client = common::cpu_client(1);
    let exe = compile(
        &client,
        r#"
func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.add %a, %b : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"#,
    );
    assert_eq!(exe.num_outputs(), 1);
    assert_eq!(exe.devices().len(), 1);
    let a = f32_buffer(&client, &[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let b = f32_buffer(&client, &[10., 20., 30., 40., 50., 60.], &[2, 3]);
    let out = run(&exe, &[&a, &b]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dims().unwrap(), &[2, 3]);
    assert_eq!(out[0].element_type().unwrap(), ElementType::F32);
    assert_eq!(f32_values(&out[0]), [11., 22., 33., 44., 55., 66.]);
    // Inputs are untouched and can be used again.
    assert!(!a.is_deleted().unwrap());
    let again = run(&exe, &[&a, &a]);
    assert_eq!(f32_values(&again[0]), [2., 4., 6., 8., 10., 12.]);
}

#[test]
fn add_generic_form_in_a_named_module() {
    let client = common::cpu_client(1);
    let exe = compile(
        &client,
        r#"
module @adder {
  "func.func"() ({
  ^bb0(%a: tensor<3xf32>, %b: tensor<3xf32>):
    %0 = "stablehlo.add"(%a, %b) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    "func.return"(%0) : (tensor<3xf32>) -> ()
  }) {function_type = (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>, sym_name = "main"} : () -> ()
}"#,
    );
    assert_eq!(exe.name(), "adder");
    let a = f32_buffer(&client, &[1., 2., 3.], &[3]);
    let out = run(&exe, &[&a, &a]);
    assert_eq!(f32_values(&out[0]), [2., 4., 6.]);
}

#[test]
fn dot_general() {
    let client = common::cpu_client(1);
    let exe = compile(
        &client,
        r#"
func.func @main(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %x: tensor<2x2x3xf32>, %y: tensor<2x3x1xf32>)
    -> (tensor<2x2xf32>, tensor<2x2x1xf32>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %1 = "stablehlo.dot_general"(%x, %y) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0],
      rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>}
      : (tensor<2x2x3xf32>, tensor<2x3x1xf32>) -> tensor<2x2x1xf32>
  return %0, %1 : tensor<2x2xf32>, tensor<2x2x1xf32>
}"#,
    );
    assert_eq!(exe.num_outputs(), 2);
    let a = f32_buffer(&client, &[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let b = f32_buffer(&client, &[1., 0., 0., 1., 1., 1.], &[3, 2]);
    let x = f32_buffer(
        &client,
        &[1., 2., 3., 4., 5., 6., 1., 1., 1., 2., 2., 2.],
        &[2, 2, 3],
    );
    let y = f32_buffer(&client, &[1., 1., 1., 1., 2., 3.], &[2, 3, 1]);
    let out = run(&exe, &[&a, &b, &x, &y]);
    // [[1,2,3],[4,5,6]] . [[1,0],[0,1],[1,1]] = [[4,5],[10,11]]
    assert_eq!(f32_values(&out[0]), [4., 5., 10., 11.]);
    // batch 0: rows . [1,1,1] = [6, 15]; batch 1: rows . [1,2,3] = [6, 12]
    assert_eq!(f32_values(&out[1]), [6., 15., 6., 12.]);
    assert_eq!(out[1].dims().unwrap(), &[2, 2, 1]);
}

#[test]
fn while_loop() {
    let client = common::cpu_client(1);
    // Sum of 0..n with a loop whose condition captures %n.
    let exe = compile(
        &client,
        r#"
func.func @main(%n: tensor<i32>) -> tensor<i32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = "stablehlo.while"(%c0, %c0) ({
  ^bb0(%i: tensor<i32>, %acc: tensor<i32>):
    %p = "stablehlo.compare"(%i, %n) {comparison_direction = #stablehlo<comparison_direction LT>}
        : (tensor<i32>, tensor<i32>) -> tensor<i1>
    "stablehlo.return"(%p) : (tensor<i1>) -> ()
  }, {
  ^bb0(%i: tensor<i32>, %acc: tensor<i32>):
    %i2 = stablehlo.add %i, %c1 : tensor<i32>
    %a2 = stablehlo.add %acc, %i : tensor<i32>
    "stablehlo.return"(%i2, %a2) : (tensor<i32>, tensor<i32>) -> ()
  }) : (tensor<i32>, tensor<i32>) -> (tensor<i32>, tensor<i32>)
  return %r#1 : tensor<i32>
}"#,
    );
    let device = &client.addressable_devices()[0];
    let n = client
        .buffer_from_host(&10i32.to_le_bytes(), ElementType::S32, &[], device)
        .unwrap();
    let out = run(&exe, &[&n]);
    assert_eq!(out[0].dims().unwrap(), &[] as &[i64]);
    assert_eq!(i32_values(&out[0]), [45]);
}

#[test]
fn reduce_with_a_region() {
    let client = common::cpu_client(1);
    let exe = compile(
        &client,
        r#"
func.func @main(%x: tensor<2x3xf32>) -> (tensor<2xf32>, tensor<3xf32>) {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %sum = "stablehlo.reduce"(%x, %zero) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%s) : (tensor<f32>) -> ()
  }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %max = stablehlo.reduce(%x init: %ninf) applies stablehlo.maximum across dimensions = [0]
      : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
  return %sum, %max : tensor<2xf32>, tensor<3xf32>
}"#,
    );
    let x = f32_buffer(&client, &[1., 9., 3., 4., 5., 6.], &[2, 3]);
    let out = run(&exe, &[&x]);
    assert_eq!(f32_values(&out[0]), [13., 15.]);
    assert_eq!(f32_values(&out[1]), [4., 9., 6.]);
}

#[test]
fn bf16_and_f16_in_and_out() {
    let client = common::cpu_client(1);
    let exe = compile(
        &client,
        r#"
func.func @main(%a: tensor<4xbf16>, %b: tensor<4xf16>) -> (tensor<4xf16>, tensor<4xbf16>) {
  %a32 = stablehlo.convert %a : (tensor<4xbf16>) -> tensor<4xf32>
  %b32 = stablehlo.convert %b : (tensor<4xf16>) -> tensor<4xf32>
  %p = stablehlo.multiply %a32, %b32 : tensor<4xf32>
  %p16 = stablehlo.convert %p : (tensor<4xf32>) -> tensor<4xf16>
  %aa = stablehlo.add %a, %a : tensor<4xbf16>
  return %p16, %aa : tensor<4xf16>, tensor<4xbf16>
}"#,
    );
    let device = &client.addressable_devices()[0];
    let a: Vec<u8> = [1.5f32, -2., 0.25, 8.]
        .iter()
        .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
        .collect();
    let b: Vec<u8> = [2f32, 3., -4., 0.5]
        .iter()
        .flat_map(|&v| f16::from_f32(v).to_le_bytes())
        .collect();
    let a = client
        .buffer_from_host(&a, ElementType::BF16, &[4], device)
        .unwrap();
    let b = client
        .buffer_from_host(&b, ElementType::F16, &[4], device)
        .unwrap();
    assert_eq!(a.on_device_size().unwrap(), 8);
    let out = run(&exe, &[&a, &b]);
    assert_eq!(out[0].element_type().unwrap(), ElementType::F16);
    assert_eq!(out[1].element_type().unwrap(), ElementType::BF16);
    let p: Vec<f32> = out[0]
        .to_host_vec()
        .unwrap()
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    let aa: Vec<f32> = out[1]
        .to_host_vec()
        .unwrap()
        .chunks_exact(2)
        .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    assert_eq!(p, [3., -6., -1., 4.]);
    assert_eq!(aa, [3., -4., 0.5, 16.]);
}

#[test]
fn private_function_via_func_call() {
    let client = common::cpu_client(1);
    let exe = compile(
        &client,
        r#"
module @calls {
  func.func private @double(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.add %x, %x : tensor<3xf32>
    return %0 : tensor<3xf32>
  }
  func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {
    %0 = func.call @double(%a) : (tensor<3xf32>) -> tensor<3xf32>
    %1 = "func.call"(%0) {callee = @double} : (tensor<3xf32>) -> tensor<3xf32>
    return %1 : tensor<3xf32>
  }
}"#,
    );
    let a = f32_buffer(&client, &[1., -2., 3.5], &[3]);
    let out = run(&exe, &[&a]);
    assert_eq!(f32_values(&out[0]), [4., -8., 14.]);
}

const DONATING_ADD: &str = r#"
func.func @main(%a: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}"#;

#[test]
fn donated_argument_is_deleted() {
    let client = common::cpu_client(1);
    let exe = compile(&client, DONATING_ADD);
    let a = f32_buffer(&client, &[1., 2., 3., 4.], &[4]);
    let b = f32_buffer(&client, &[1., 1., 1., 1.], &[4]);
    let out = run(&exe, &[&a, &b]);
    assert_eq!(f32_values(&out[0]), [2., 3., 4., 5.]);
    assert!(a.is_deleted().unwrap());
    assert!(!b.is_deleted().unwrap());
    match exe.execute(&[[&a, &b]], &ExecuteOptions::default()) {
        Err(radix_pjrt::Error::Pjrt { message, .. }) => {
            assert!(message.contains("deleted or donated"), "{message}")
        }
        other => panic!("expected a PJRT error, got {other:?}"),
    }
    assert!(a.to_host_vec().is_err());
    // The output can be donated in turn.
    let out2 = run(&exe, &[&out[0], &b]);
    assert_eq!(f32_values(&out2[0]), [3., 4., 5., 6.]);
    assert!(out[0].is_deleted().unwrap());
}

#[test]
fn non_donatable_input_is_kept() {
    let client = common::cpu_client(1);
    let exe = compile(&client, DONATING_ADD);
    let a = f32_buffer(&client, &[1., 2., 3., 4.], &[4]);
    let b = f32_buffer(&client, &[1., 1., 1., 1.], &[4]);
    let options = ExecuteOptions {
        non_donatable_input_indices: vec![0],
    };
    let out = exe.execute(&[[&a, &b]], &options).unwrap();
    assert_eq!(f32_values(&out[0][0]), [2., 3., 4., 5.]);
    assert!(!a.is_deleted().unwrap());
    assert_eq!(f32_values(&a), [1., 2., 3., 4.]);
}

#[test]
fn execute_async_returns_events() {
    let client = common::cpu_client(1);
    let exe = compile(&client, DONATING_ADD);
    let a = f32_buffer(&client, &[1., 2., 3., 4.], &[4]);
    let b = f32_buffer(&client, &[1., 1., 1., 1.], &[4]);
    let pending = exe
        .execute_async(&[[&a, &b]], &ExecuteOptions::default())
        .unwrap();
    assert_eq!(pending.done.len(), 1);
    pending.done[0].wait().unwrap();
    assert!(pending.done[0].is_ready().unwrap());
    let out = pending.wait().unwrap();
    let ready = out[0][0].ready_event().unwrap();
    ready.wait().unwrap();
    assert_eq!(f32_values(&out[0][0]), [2., 3., 4., 5.]);
}

#[test]
fn buffers_and_executables_outlive_their_client_handle() {
    let client = common::cpu_client(1);
    let exe = compile(&client, DONATING_ADD);
    let a = f32_buffer(&client, &[1., 2., 3., 4.], &[4]);
    let b = f32_buffer(&client, &[0.; 4], &[4]);
    drop(client);
    let out = run(&exe, &[&a, &b]);
    drop(exe);
    assert_eq!(f32_values(&out[0]), [1., 2., 3., 4.]);
}

#[test]
fn threads_share_an_executable() {
    let client = common::cpu_client(2);
    let exe = compile(&client, DONATING_ADD);
    let b = f32_buffer(&client, &[1., 1., 1., 1.], &[4]);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (client, exe, b) = (&client, &exe, &b);
            s.spawn(move || {
                for i in 0..20 {
                    let v = (t * 100 + i) as f32;
                    let a = f32_buffer(client, &[v; 4], &[4]);
                    let out = run(exe, &[&a, b]);
                    assert_eq!(f32_values(&out[0]), [v + 1.; 4]);
                }
            });
        }
    });
}

/// Downloads on the CPU plugin read the buffer's memory in place: an
/// output made by a transpose (whose layout XLA chooses) and an output
/// aliased to a donated input both read back in row-major order, as the
/// plugin's own copy (`PJRT_Buffer_ToHostBuffer`) gives them.
#[test]
fn outputs_read_back_row_major() {
    let client = common::cpu_client(1);
    let exe = compile(
        &client,
        r#"
func.func @main(%a: tensor<2x3x4xf32>) -> (tensor<4x2x3xf32>, tensor<3x4x2xf32>) {
  %0 = stablehlo.transpose %a, dims = [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = stablehlo.transpose %a, dims = [1, 2, 0] : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  return %0, %1 : tensor<4x2x3xf32>, tensor<3x4x2xf32>
}"#,
    );
    let values: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let a = f32_buffer(&client, &values, &[2, 3, 4]);
    let out = run(&exe, &[&a]);
    let at = |i: usize, j: usize, k: usize| values[(i * 3 + j) * 4 + k];
    let mut first = vec![];
    for k in 0..4 {
        for i in 0..2 {
            for j in 0..3 {
                first.push(at(i, j, k));
            }
        }
    }
    let mut second = vec![];
    for j in 0..3 {
        for k in 0..4 {
            for i in 0..2 {
                second.push(at(i, j, k));
            }
        }
    }
    assert_eq!(f32_values(&out[0]), first);
    assert_eq!(f32_values(&out[1]), second);

    let exe = compile(&client, DONATING_ADD);
    let b = f32_buffer(&client, &[1., 2., 3., 4.], &[4]);
    let ones = f32_buffer(&client, &[1.; 4], &[4]);
    let sum = run(&exe, &[&b, &ones]);
    assert_eq!(f32_values(&sum[0]), [2., 3., 4., 5.]);
    // A second download of the same buffer reads the same values.
    assert_eq!(f32_values(&sum[0]), [2., 3., 4., 5.]);
}
