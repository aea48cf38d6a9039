// Soft-capped cross-entropy fused with its backward (see ops.h): logits [n, vpad] of one element
// type, overwritten by dlogits when grad_scale != 0; targets i32 [n] (-1 = ignored); losses f32 [n].
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

// Targets outside [0, vocab) other than -1 are reported through `err` and treated as ignored.
cudaError_t launch_softcap_cross_entropy(DType t, float* losses, void* logits, const int32_t* targets, int64_t n,
                                         int64_t vpad, int64_t vocab, float softcap, float grad_scale,
                                         ErrorSink err, cudaStream_t stream);

}  // namespace nanoddp::cuda
