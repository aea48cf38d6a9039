// RMSNorm without a weight over rows of length c: x, y, dy, dx [rows, c] of one element type;
// rstd f32 [rows].
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

// y = x * rstd, rstd = 1 / sqrt(mean(x^2) + eps)
cudaError_t launch_rmsnorm_forward(DType t, void* y, float* rstd, const void* x, int64_t rows, int64_t c, float eps,
                                   cudaStream_t stream);
// dx (+)= rstd * (dy - y * mean(dy * y)); dx may alias dy.
cudaError_t launch_rmsnorm_backward(DType t, void* dx, const void* dy, const void* y, const float* rstd, int64_t rows,
                                    int64_t c, bool accumulate, cudaStream_t stream);

}  // namespace nanoddp::cuda
