// Elementwise stages of Newton-Schulz (and of Polar Express, which shares them) over a batch of matrices of one shape, one launch per stage
// (the GEMMs go through cuBLASLt, see CudaBackend::newton_schulz in backend_cuda.cpp).
// X-side buffers hold T = bf16 (nanochat's precision: every stage rounds its result to bf16) or
// f32 (all arithmetic f32). "round" below means: to T.
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

// The f32 matrices of one batch, by address (kernel parameters: at most kNsMaxBatch of them).
constexpr int kNsMaxBatch = 32;
struct NsMatrices {
  float* p[kNsMaxBatch];
};

// X [batch, m, n]: X[i] = round(x.p[i]) from f32 [rows, cols]; transposed (m = cols) when `transpose`.
cudaError_t launch_ns_load(DType t, void* X, const NsMatrices& x, int batch, int64_t rows, int64_t cols,
                           bool transpose, cudaStream_t stream);
// f32 x.p[i] [rows, cols] = X[i] (transposed back when `transpose`).
cudaError_t launch_ns_store(DType t, const NsMatrices& x, const void* X, int batch, int64_t rows, int64_t cols,
                            bool transpose, cudaStream_t stream);
// Device scratch for launch_ns_normalise of `batch` matrices, in bytes.
size_t ns_normalise_scratch_bytes(int batch);
// For each X[i] of X [batch, n]: X[i] = round(X[i] / d), d = round(round(round(||X[i]||_F) * factor) + eps)
// (Newton-Schulz: factor 1, eps 1e-7; Polar Express: 1.01, 1e-6); the squares are summed in f64 in a
// fixed order.
cudaError_t launch_ns_normalise(DType t, void* X, int batch, int64_t n, void* scratch, cudaStream_t stream,
                                float factor = 1.f, float eps = 1e-7f);
// out = round(s * in)
cudaError_t launch_ns_scale(DType t, void* out, const void* in, int64_t n, float s, cudaStream_t stream);
// out = round(round(s * a) + b); out may alias a or b.
cudaError_t launch_ns_combine(DType t, void* out, const void* a, const void* b, int64_t n, float s,
                              cudaStream_t stream);

}  // namespace nanoddp::cuda
