// Token embedding: out [n, c] = table [vocab, c] rows gathered by ids i32 [n] (out and table of
// one element type); the backward adds dout [n, c] (f32, bf16 or f16) into dtable f32 [vocab, c].
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

// Ids outside [0, vocab) give zero rows and are reported through `err`.
cudaError_t launch_embedding_forward(DType t, void* out, const void* table, const int32_t* ids, int64_t n,
                                     int64_t vocab, int64_t c, ErrorSink err, cudaStream_t stream);

// Device scratch the backward needs for n tokens of c channels (sort buffers and partial sums).
size_t embedding_backward_scratch_bytes(int64_t n, int64_t c);

// dtable += scatter of dout by ids, in the same order every run (see embedding.cu). Ids outside
// [0, vocab) are skipped and one of them is reported to `err` (as the CPU backend refuses them).
cudaError_t launch_embedding_backward(DType dout_t, float* dtable, const void* dout, const int32_t* ids, int64_t n,
                                      int64_t vocab, int64_t c, void* scratch, size_t scratch_bytes, ErrorSink err,
                                      cudaStream_t stream);

}  // namespace nanoddp::cuda
