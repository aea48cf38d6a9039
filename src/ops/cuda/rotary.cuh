// Rotary position embedding, half-split (see ops.h): x, y [B, T, H, D] of one element type,
// cos, sin f32 [rows, D / 2]; y may alias x.
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

cudaError_t launch_rotary(DType t, void* y, const void* x, const float* cos, const float* sin, int64_t batch,
                          int64_t seq, int64_t heads, int64_t d, int64_t pos0, bool inverse, cudaStream_t stream);

}  // namespace nanoddp::cuda
