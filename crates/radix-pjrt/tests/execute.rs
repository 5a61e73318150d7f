//! Compiling and running hand-written StableHLO and checking the numbers.

mod common;

use common::{compile, f32_buffer, f32_values, run};
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
    let a = f32_buffer(&client, &[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let b = f32_buffer(&client, &[10., 20., 30., 40., 50., 60.], &[2, 3]);
    let out = run(&exe, &[&a, &b]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dims().unwrap(), &[2, 3]);
    assert_eq!(out[0].element_type().unwrap(), ElementType::F32);
    assert_eq!(f32_values(&out[0]), [11., 22., 33., 44., 55., 66.]);
}
