// The tensor-core flash-attention kernels (attention_flash.cu), called by attention.cu.
#pragma once

#include "ops/cuda/attention.cuh"

namespace nanoddp::cuda {

// Head sizes the flash kernels run: multiples of 8 from 64 to 128 (compiled for widths 64, 96 and
// 128; a head_dim between them runs at the next width up with zero columns).
bool flash_supports_head_dim(int64_t d);

// t is BF16 or F16; every pointer is a t tensor but lse (and delta) in f32.
cudaError_t launch_flash_forward(DType t, void* out, float* lse, const void* q, const void* k, const void* v,
                                 const AttentionShape& s, float scale, cudaStream_t stream);

// delta f32 [B, Hq, T] = rowsum(dout * out), computed by the caller.
cudaError_t launch_flash_backward(DType t, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                  const void* k, const void* v, const float* lse, const float* delta,
                                  const AttentionShape& s, float scale, cudaStream_t stream);

}  // namespace nanoddp::cuda
