// Optimizer updates on f32 buffers [n]: AdamW and Muon's Nesterov momentum, and NorMuon's update of a
// matrix (see ops.h).
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

// The per-call scalars of AdamW, computed on the host exactly as the CPU kernel computes them.
struct AdamWScalars {
  float step_size;  // lr / (1 - beta1^step)
  float bc2_sqrt;   // sqrt(1 - beta2^step)
  float decay;      // 1 - lr * weight_decay
  float beta1, beta2, eps;
};

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p = p decay - step_size m / (sqrt(v) / bc2_sqrt + eps)
cudaError_t launch_adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s,
                         cudaStream_t stream);

// buf = lerp(buf, g, 1 - momentum); g = lerp(g, buf, momentum), torch.lerp's two-sided formula.
cudaError_t launch_muon_momentum(float* g, float* buf, int64_t n, float momentum, cudaStream_t stream);
// out[0] = sum(x^2): kSumSquaresBlocks blocks write f32 partials (partials: that many floats), one
// block adds them in double in a fixed order, so the result does not depend on scheduling.
inline constexpr int kSumSquaresBlocks = 256;
cudaError_t launch_sum_squares(float* out, const float* x, int64_t n, float* partials, cudaStream_t stream);

// NorMuon's update (ops.h normuon_update): p, g [rows, cols]; v [k], k = rows when rows >= cols,
// else cols; scratch: 2 k floats on the device (mean squares, then scales).
cudaError_t launch_normuon_update(float* p, const float* g, float* v, int64_t rows, int64_t cols, float lr,
                                  float weight_decay, float beta2, float* scratch, cudaStream_t stream);

}  // namespace nanoddp::cuda
