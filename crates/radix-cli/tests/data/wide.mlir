module @jit_wide attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<3xf64>, %arg1: tensor<3xi64>, %arg2: tensor<2x2xf16>) -> (tensor<3xf64> {jax.result_info = "result[0]"}, tensor<3xi64> {jax.result_info = "result[1]"}, tensor<2x2xf32> {jax.result_info = "result[2]"}) {
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f64>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f64>) -> tensor<3xf64>
    %1 = stablehlo.multiply %arg0, %0 : tensor<3xf64>
    %2 = stablehlo.convert %arg1 : (tensor<3xi64>) -> tensor<3xf64>
    %3 = stablehlo.add %1, %2 : tensor<3xf64>
    %c = stablehlo.constant dense<1> : tensor<i64>
    %4 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i64>) -> tensor<3xi64>
    %5 = stablehlo.add %arg1, %4 : tensor<3xi64>
    %6 = stablehlo.convert %arg2 : (tensor<2x2xf16>) -> tensor<2x2xf32>
    %cst_0 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %7 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x2xf32>
    %8 = stablehlo.multiply %6, %7 : tensor<2x2xf32>
    return %3, %5, %8 : tensor<3xf64>, tensor<3xi64>, tensor<2x2xf32>
  }
}
