// The Hopper flash-attention forward (attention_hopper.cu): wgmma and TMA, instructions of sm_90a
// only, so it is compiled for sm_90a alone and runs on compute capability 9.0 (H100, H200, GH200).
// NANODDP_CUDA_ATTENTION=hopper selects it (cudnn_attention.h); the backward stays on the mma.sync
// kernels of attention_flash.cu, which take its lse unchanged.
#pragma once

#include <string>

#include "ops/cuda/attention.cuh"

namespace nanoddp::cuda {

// Empty when the Hopper kernel can run on `device`; else why not, in words: the build has no sm_90a
// code (CMAKE_CUDA_ARCHITECTURES without 90), the GPU is not compute capability 9.0, or the driver
// has no cuTensorMapEncodeTiled.
std::string hopper_attention_unavailable(int device);

// The calls it takes: those the flash forward takes (attention_uses_flash), whose rows are 16-byte
// aligned, as the TMA needs too; head_dim runs at a compute width of 64 or 128.
// t is BF16 or F16; lse f32 [B, Hq, Tq], the same values as launch_flash_forward's.
cudaError_t launch_hopper_forward(DType t, void* out, float* lse, const void* q, const void* k, const void* v,
                                  const AttentionShape& s, float scale, cudaStream_t stream);

}  // namespace nanoddp::cuda
