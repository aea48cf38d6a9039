// A plain tiled GEMM for the cases cuBLASLt does not take (f32 operands with a 16-bit output, or no
// algorithm for an odd layout), row-major like ops::matmul: c[m, n] = alpha op(a) op(b) + beta c.
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

// lda, ldb, ldc: row strides in elements of the stored a, b, c.
cudaError_t launch_gemm_fallback(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                 DType ab_t, const void* a, int64_t lda, const void* b, int64_t ldb, float beta,
                                 DType c_t, void* c, int64_t ldc, cudaStream_t stream);

}  // namespace nanoddp::cuda
