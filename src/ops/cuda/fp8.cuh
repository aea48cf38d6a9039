// The quantization half of matmul_fp8 (Note [fp8 tensorwise scaling] in ops/fp8_math.h): amax of a
// tensor and its fp8 codes, on the device, with nothing read back to the host. The GEMM itself is
// cuBLASLt's (CublasLtGemm::run_fp8 in ops/cuda/matmul.h), which reads the inverse scales these
// kernels leave on the device through its scale pointers.
#pragma once

#include <cstdint>

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

// *amax = max |x| over x [n] of type t (a NaN anywhere gives a NaN). amax is f32 [1] on the device,
// zeroed here first.
cudaError_t launch_fp8_amax(DType t, const void* x, int64_t n, float* amax, cudaStream_t stream);

// codes = fp8(x * scale) with scale = FP8_MAX / max(*amax, 1e-12) (e4m3fn, or e5m2 when `e5m2`), and
// *inv_scale = 1 / scale. x [rows, cols] of type t, row-major; codes u8 [rows, cols], or with
// `transpose` [cols, rows] (the K-major layout cuBLASLt's FP8 GEMM takes on Hopper).
cudaError_t launch_fp8_quantize(DType t, const void* x, int64_t rows, int64_t cols, bool transpose, bool e5m2,
                                const float* amax, uint8_t* codes, float* inv_scale, cudaStream_t stream);

}  // namespace nanoddp::cuda
