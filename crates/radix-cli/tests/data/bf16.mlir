module @jit_bf16 attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x3xbf16>, %arg1: tensor<2x3xbf16>) -> (tensor<2x3xbf16> {jax.result_info = "result[0]"}, tensor<2x3xf32> {jax.result_info = "result[1]"}) {
    %0 = stablehlo.multiply %arg0, %arg1 : tensor<2x3xbf16>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<bf16>
    %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<bf16>) -> tensor<2x3xbf16>
    %2 = stablehlo.add %0, %1 : tensor<2x3xbf16>
    %3 = stablehlo.multiply %arg0, %arg1 : tensor<2x3xbf16>
    %4 = stablehlo.convert %3 : (tensor<2x3xbf16>) -> tensor<2x3xf32>
    return %2, %4 : tensor<2x3xbf16>, tensor<2x3xf32>
  }
}
