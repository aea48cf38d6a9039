// Elementwise kernels: fill, scale, axpy, casts between f32, bf16 and f16, relu^2 and its gradient.
// Buffers are flat [n] of the given element type; in-place calls (out == input) are allowed.
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

cudaError_t launch_fill(DType t, void* x, int64_t n, float value, cudaStream_t stream);
cudaError_t launch_scale(DType t, void* x, int64_t n, float s, cudaStream_t stream);
// x[i, :] *= s[i]; x f32 [rows, cols], s f32 [rows]
cudaError_t launch_scale_rows(float* x, const float* s, int64_t rows, int64_t cols, cudaStream_t stream);
// y += alpha * x
cudaError_t launch_axpy(DType t, void* y, const void* x, int64_t n, float alpha, cudaStream_t stream);
// dst = src converted (round to nearest even into a narrower type); same types copy.
cudaError_t launch_cast(DType dst_t, void* dst, DType src_t, const void* src, int64_t n, cudaStream_t stream);
// y = max(x, 0)^2
cudaError_t launch_relu2_forward(DType t, void* y, const void* x, int64_t n, cudaStream_t stream);
// dx = dy * 2 max(x, 0)
cudaError_t launch_relu2_backward(DType t, void* dx, const void* dy, const void* x, int64_t n, cudaStream_t stream);

}  // namespace nanoddp::cuda
