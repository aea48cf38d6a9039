// Sampling one id per row on the device (ops.h sample_tokens; Note [sampling on the device] in
// ops/sample_math.h): logits [rows, vpad] of one element type; ids i32 [rows]; uniforms f32
// [rows] (unread at temperature <= 0); z f32 [rows, vocab] scratch for the capped logits.
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

struct SampleArgs {
  int64_t rows, vpad, vocab;
  float softcap, temperature;
  int64_t top_k;
};

cudaError_t launch_sample_tokens(DType t, int32_t* ids, const void* logits, const float* uniforms, float* z,
                                 const SampleArgs& a, cudaStream_t stream);

}  // namespace nanoddp::cuda
