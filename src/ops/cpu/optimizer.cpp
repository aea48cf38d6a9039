// Optimizer updates: AdamW and Muon's Nesterov momentum (elementwise), and Newton-Schulz.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

// The order of operations follows torch.optim.AdamW (decay, moments, then
// p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)) so that results agree closely with it.
void CpuBackend::adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& s) {
  float *pp = p.data<float>(), *pm = m.data<float>(), *pv = v.data<float>();
  const float* pg = g.data<float>();
  const int64_t n = p.numel();
  const double bc1 = 1.0 - std::pow(double(s.beta1), double(s.step));
  const double bc2 = 1.0 - std::pow(double(s.beta2), double(s.step));
  const float step_size = static_cast<float>(s.lr / bc1), bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.f - s.lr * s.weight_decay, b1 = s.beta1, b2 = s.beta2, eps = s.eps;
#pragma omp parallel for simd if (n > kParallelGrain)
  for (int64_t i = 0; i < n; i++) {
    float gi = pg[i];
    float mi = pm[i] * b1 + (1.f - b1) * gi;
    float vi = pv[i] * b2 + (1.f - b2) * gi * gi;
    pm[i] = mi;
    pv[i] = vi;
    pp[i] = pp[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

namespace {

// torch.lerp's formula (two forms, chosen by the weight, for accuracy near either end), so that
// the momentum is bit-identical to nanochat's before it enters the rounding-sensitive
// Newton-Schulz iteration.
inline float lerp(float a, float b, float w) { return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.f - w); }

}  // namespace

void CpuBackend::muon_momentum(const Tensor& g, const Tensor& buf, float momentum) {
  float *pg = g.data<float>(), *pb = buf.data<float>();
  const int64_t n = g.numel();
#pragma omp parallel for simd if (n > kParallelGrain)
  for (int64_t i = 0; i < n; i++) {
    pb[i] = lerp(pb[i], pg[i], 1.f - momentum);
    pg[i] = lerp(pg[i], pb[i], momentum);
  }
}

namespace {

// Rounds every element to bf16 (kept in f32), emulating a bf16 tensor op's output; a no-op in
// f32 mode.
struct Rounding {
  bool bf16;
  float operator()(float v) const { return bf16 ? round_to_bf16(v) : v; }
  void all(float* x, int64_t n) const {
    if (!bf16) return;
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; i++) x[i] = round_to_bf16(x[i]);
  }
};

}  // namespace

// nanochat runs Newton-Schulz on bf16 tensors. In bf16 mode each step below rounds its result to
// bf16 as the corresponding PyTorch bf16 op on CUDA would (GEMMs accumulate in f32 and round once,
// scalars are f32), evaluating b * A + c * A @ A as (b A) + ((c A) A), the order Python gives it.
void CpuBackend::newton_schulz(const Tensor& x, int steps, bool bf16) {
  const Rounding r{bf16};
  constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  const int64_t rows = x.dim(0), cols = x.dim(1);
  const bool transposed = rows > cols;
  const int64_t m = transposed ? cols : rows, n = transposed ? rows : cols;  // X is [m, n], m <= n
  float* px = x.data<float>();

  // Buffers sized by the matrix, reused across calls of the same shape.
  thread_local std::vector<float> xs, as, cas, bs, bxs;
  xs.resize(m * n);
  as.resize(m * m);
  cas.resize(m * m);
  bs.resize(m * m);
  bxs.resize(m * n);
  float *X = xs.data(), *A = as.data(), *cA = cas.data(), *B = bs.data(), *BX = bxs.data();

  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      float v = r(px[i * cols + j]);
      if (transposed)
        X[j * rows + i] = v;
      else
        X[i * cols + j] = v;
    }
  double ss = 0;
  for (int64_t i = 0; i < m * n; i++) ss += double(X[i]) * X[i];
  const float norm = r(static_cast<float>(std::sqrt(ss)));
  const float denom = r(norm + 1e-7f);
  for (int64_t i = 0; i < m * n; i++) X[i] = r(X[i] / denom);

  for (int s = 0; s < steps; s++) {
    sgemm(false, true, m, m, n, 1.f, X, n, X, n, 0.f, A, m);  // A = X X^T
    r.all(A, m * m);
    for (int64_t i = 0; i < m * m; i++) cA[i] = r(c * A[i]);
    sgemm(false, false, m, m, m, 1.f, cA, m, A, m, 0.f, B, m);  // (cA) A
    r.all(B, m * m);
    for (int64_t i = 0; i < m * m; i++) B[i] = r(r(b * A[i]) + B[i]);
    sgemm(false, false, m, n, m, 1.f, B, m, X, n, 0.f, BX, n);  // B X
    r.all(BX, m * n);
    for (int64_t i = 0; i < m * n; i++) X[i] = r(r(a * X[i]) + BX[i]);
  }

  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) px[i * cols + j] = transposed ? X[j * rows + i] : X[i * cols + j];
}

}  // namespace nanoddp::ops::cpu
