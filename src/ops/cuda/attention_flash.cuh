// The tensor-core flash-attention kernels (attention_flash.cu), called by attention.cu.
#pragma once

#include <cuda_bf16.h>

#include "ops/cuda/attention.cuh"

namespace nanoddp::cuda {

// Head sizes the flash kernels are compiled for.
bool flash_supports_head_dim(int64_t d);

cudaError_t launch_flash_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                 const __nv_bfloat16* v, const AttentionShape& s, float scale, cudaStream_t stream);

// delta f32 [B, Hq, T] = rowsum(dout * out), computed by the caller.
cudaError_t launch_flash_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                                  const __nv_bfloat16* dout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                  const __nv_bfloat16* v, const float* lse, const float* delta,
                                  const AttentionShape& s, float scale, cudaStream_t stream);

}  // namespace nanoddp::cuda
