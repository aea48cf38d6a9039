// The Hopper flash-attention kernels (attention_hopper.cu, the forward; attention_hopper_backward.cu,
// the backward): wgmma and TMA, instructions of sm_90a only, so they are compiled for sm_90a alone
// and run on compute capability 9.0 (H100, H200, GH200). NANODDP_CUDA_ATTENTION=hopper selects them
// (cudnn_attention.h). Their lse is the mma.sync kernels' (attention_flash.cu), so either backward
// takes either forward's.
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

// The backward of a call launch_hopper_forward takes with tq == kv_len (training): dq, dk, dv
// from dout, q, k, v, the forward's lse and delta = rowsum(dout * out) [B, Hq, Tq] (f32), the same
// inputs and outputs as launch_flash_backward, deterministic like it (each output written by one
// block, sums in a fixed order).
cudaError_t launch_hopper_backward(DType t, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                   const void* k, const void* v, const float* lse, const float* delta,
                                   const AttentionShape& s, float scale, cudaStream_t stream);

}  // namespace nanoddp::cuda
