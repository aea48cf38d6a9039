// Elementwise stages of Newton-Schulz (the GEMMs go through cuBLASLt, see newton_schulz.cpp).
// X-side buffers hold T = bf16 (nanochat's precision: every stage rounds its result to bf16) or
// f32 (all arithmetic f32). "round" below means: to T.
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

// X [m, n] = round(x) from f32 x [rows, cols]; transposed (m = cols) when `transpose`.
cudaError_t launch_ns_load(DType t, void* X, const float* x, int64_t rows, int64_t cols, bool transpose,
                           cudaStream_t stream);
// f32 x [rows, cols] = X (transposed back when `transpose`).
cudaError_t launch_ns_store(DType t, float* x, const void* X, int64_t rows, int64_t cols, bool transpose,
                            cudaStream_t stream);
// Device scratch for launch_ns_normalise, in bytes.
size_t ns_normalise_scratch_bytes();
// X = round(X / d), d = round(round(||X||_F) + 1e-7); the squares are summed in f64 in a fixed order.
cudaError_t launch_ns_normalise(DType t, void* X, int64_t n, void* scratch, cudaStream_t stream);
// out = round(s * in)
cudaError_t launch_ns_scale(DType t, void* out, const void* in, int64_t n, float s, cudaStream_t stream);
// out = round(round(s * a) + b); out may alias a or b.
cudaError_t launch_ns_combine(DType t, void* out, const void* a, const void* b, int64_t n, float s,
                              cudaStream_t stream);

}  // namespace nanoddp::cuda
