//! Bad input comes back as an `Err`, never an abort.

mod common;

use common::{compile, f32_buffer};
use radix_pjrt::{
    Client, ClientOptions, CompileOptions, ElementType, Error, ExecuteOptions, NamedValue, Value,
};

/// Compiles `mlir` and expects a PJRT compile error whose message contains `needle`.
fn check_compile_error(mlir: &str, needle: &str) {
    let client = common::cpu_client(1);
    match client.compile(mlir, &CompileOptions::default()) {
        Err(Error::Pjrt {
            call,
            code,
            message,
        }) => {
            assert_eq!(call, "PJRT_Client_Compile");
            assert_ne!(code, "OK");
            assert!(
                message.contains(needle),
                "expected {needle:?} in:\n{message}"
            );
        }
        Err(e) => panic!("expected a PJRT error, got {e}"),
        Ok(_) => panic!("compiled:\n{mlir}"),
    }
}

const ADD: &str = r#"
func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.add %a, %b : tensor<2xf32>
  return %0 : tensor<2xf32>
}"#;

#[test]
fn malformed_mlir() {
    check_compile_error("func.func @main(%a: tensor<2xf32> -> {", "");
    check_compile_error("", "");
    check_compile_error("\u{0}\u{1}garbage", "");
}

#[test]
fn unknown_op() {
    check_compile_error(
        r#"
func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "stablehlo.frobnicate"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"#,
        "frobnicate",
    );
}

#[test]
fn type_error() {
    check_compile_error(
        r#"
func.func @main(%a: tensor<2xf32>, %b: tensor<3xf32>) -> tensor<2xf32> {
  %0 = stablehlo.add %a, %b : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"#,
        "",
    );
}

#[test]
fn missing_main() {
    check_compile_error(&ADD.replace("@main", "@not_main"), "main");
}

#[test]
fn zero_replicas_or_partitions() {
    let client = common::cpu_client(1);
    for (num_replicas, num_partitions) in [(0, 1), (1, 0), (0, 0)] {
        let options = CompileOptions {
            num_replicas,
            num_partitions,
            ..CompileOptions::default()
        };
        assert!(matches!(
            client.compile(ADD, &options),
            Err(Error::InvalidArgument(_))
        ));
    }
}

#[test]
fn bad_device_assignment() {
    let client = common::cpu_client(1);
    let options = CompileOptions {
        device_assignment: Some(vec![0, 1]),
        ..CompileOptions::default()
    };
    assert!(matches!(
        client.compile(ADD, &options),
        Err(Error::InvalidArgument(_))
    ));
    let options = CompileOptions {
        device_assignment: Some(vec![7]),
        ..CompileOptions::default()
    };
    assert!(client.compile(ADD, &options).is_err());
}

#[test]
fn wrong_argument_count() {
    let client = common::cpu_client(1);
    let exe = compile(&client, ADD);
    let a = f32_buffer(&client, &[1., 2.], &[2]);
    let options = ExecuteOptions::default();
    assert_eq!(exe.num_parameters(), Some(2));
    for args in [vec![&a], vec![&a, &a, &a], vec![]] {
        match exe.execute(&[args], &options) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("2 parameters"), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    // One argument list per device of the executable.
    let none: [Vec<&radix_pjrt::Buffer>; 0] = [];
    assert!(matches!(
        exe.execute(&none, &options),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        exe.execute(&[vec![&a, &a], vec![&a, &a]], &options),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn wrong_argument_shape_or_dtype() {
    let client = common::cpu_client(1);
    let exe = compile(&client, ADD);
    let device = &client.addressable_devices()[0];
    let a = f32_buffer(&client, &[1., 2.], &[2]);
    let long = f32_buffer(&client, &[1., 2., 3.], &[3]);
    let int = client
        .buffer_from_host(&[0u8; 8], ElementType::S32, &[2], device)
        .unwrap();
    let options = ExecuteOptions::default();
    // The plugin itself only rejects a wrong byte size: an i32[2] passes as
    // an f32[2]. The compiled parameter shapes catch both.
    match exe.execute(&[[&a, &long]], &options) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("argument 1"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    match exe.execute(&[[&int, &a]], &options) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("argument 0") && m.contains("i32"), "{m}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn wrong_host_buffer_size() {
    let client = common::cpu_client(1);
    let device = &client.addressable_devices()[0];
    let check = |bytes: &[u8], ty, dims: &[i64]| {
        assert!(matches!(
            client.buffer_from_host(bytes, ty, dims, device),
            Err(Error::InvalidArgument(_))
        ))
    };
    check(&[0; 7], ElementType::F32, &[2]);
    check(&[0; 9], ElementType::F32, &[2]);
    check(&[0; 8], ElementType::F64, &[2]);
    check(&[0; 8], ElementType::F32, &[-2]);
    check(&[], ElementType::F32, &[i64::MAX, i64::MAX]);
    let a = f32_buffer(&client, &[1., 2.], &[2]);
    let mut short = [0u8; 7];
    assert!(matches!(
        a.to_host(&mut short),
        Err(Error::InvalidArgument(_))
    ));
    let mut exact = [0u8; 8];
    a.to_host(&mut exact).unwrap();
}

#[test]
fn device_of_another_client() {
    let one = common::cpu_client(1);
    let other = common::cpu_client(1);
    let foreign = &other.addressable_devices()[0];
    let r = one.buffer_from_host(&[0; 4], ElementType::F32, &[], foreign);
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
    let exe = compile(&one, ADD);
    let b = f32_buffer(&other, &[1., 2.], &[2]);
    assert!(matches!(
        exe.execute(&[[&b, &b]], &ExecuteOptions::default()),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn bad_client_options() {
    let plugin = common::cpu_plugin();
    let zero = ClientOptions {
        cpu_device_count: Some(0),
        ..ClientOptions::default()
    };
    assert!(matches!(
        Client::new(plugin.clone(), &zero),
        Err(Error::InvalidArgument(_))
    ));
    // The plugin aborts on a non-int64 cpu_device_count, so it never sees one.
    for value in [
        Value::Bool(true),
        Value::Float(2.0),
        Value::String("2".into()),
        Value::Int64List(vec![2]),
    ] {
        let options = ClientOptions {
            extra: vec![NamedValue::new("cpu_device_count", value)],
            ..ClientOptions::default()
        };
        assert!(matches!(
            Client::new(plugin.clone(), &options),
            Err(Error::InvalidArgument(_))
        ));
    }
}

#[test]
fn garbage_serialized_executable() {
    let client = common::cpu_client(1);
    assert!(client.deserialize_and_load(&[]).is_err());
    assert!(
        client
            .deserialize_and_load(b"not an executable at all")
            .is_err()
    );
    let exe = compile(&client, ADD);
    let bytes = exe.serialize().unwrap();
    assert!(
        client
            .deserialize_and_load(&bytes[..bytes.len() / 2])
            .is_err()
    );
}

const DONATING_ADD: &str = r#"
func.func @main(%a: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}"#;

#[test]
fn buffer_on_the_wrong_device() {
    let client = common::cpu_client(2);
    let exe = compile(&client, DONATING_ADD);
    let d1 = &client.addressable_devices()[1];
    let x = client
        .buffer_from_host(
            &common::f32_bytes(&[1., 2., 3., 4.]),
            ElementType::F32,
            &[4],
            d1,
        )
        .unwrap();
    let y = f32_buffer(&client, &[1., 1., 1., 1.], &[4]);
    match exe.execute(&[[&x, &y]], &ExecuteOptions::default()) {
        Err(Error::Pjrt { message, .. }) => assert!(message.contains("device"), "{message}"),
        other => panic!("expected a PJRT error, got {other:?}"),
    }
    assert!(!x.is_deleted().unwrap());
}

#[test]
fn donated_buffer_passed_twice() {
    let client = common::cpu_client(1);
    let exe = compile(&client, DONATING_ADD);
    let y = f32_buffer(&client, &[1., 1., 1., 1.], &[4]);
    match exe.execute(&[[&y, &y]], &ExecuteOptions::default()) {
        Err(Error::Pjrt { message, .. }) => assert!(message.contains("donated"), "{message}"),
        other => panic!("expected a PJRT error, got {other:?}"),
    }
}
