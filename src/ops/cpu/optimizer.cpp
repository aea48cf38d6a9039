// Optimizer updates: AdamW and Muon's Nesterov momentum (elementwise), and Newton-Schulz.
#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
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

// Muon's quintic coefficients.
constexpr float kNsA = 3.4445f, kNsB = -4.7750f, kNsC = 2.0315f;

// c = a op(b) on T buffers (row-major, ldc = n): sgemm in f32; in bf16 the bf16 matmul (f32
// accumulation, the result rounded once), about twice sgemm's rate where the CPU has bf16 dot
// products or AMX (docs/benchmarks.md).
template <typename T>
void ns_gemm(bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, const T* b, int64_t ldb, T* c) {
  if constexpr (std::is_same_v<T, bf16>)
    bf16_gemm(false, trans_b, m, n, k, 1.f, a, k, b, ldb, 0.f, c, n, true);
  else
    sgemm(false, trans_b, m, n, k, 1.f, a, k, b, ldb, 0.f, c, n);
}

// dst [cols, rows] = src [rows, cols]^T in square tiles, so that both the rows read and the columns
// written stay in cache. Types are converted beforehand or afterwards, over contiguous arrays
// where the conversion vectorises; converting inside the strided loop, element by element, took
// 15% of the samples of a 1024 x 256 matrix's bf16 Newton-Schulz against 11% now (perf, Zen 5).
template <typename T>
void transpose_into(T* dst, const T* src, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
#pragma omp parallel for collapse(2) if (rows * cols > kParallelGrain)
  for (int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
      for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) dst[j * rows + i] = src[i * cols + j];
    }
}

// The iteration on buffers of T (float, or bf16 for nanochat's bf16 Newton-Schulz): every tensor
// op's result is stored as T, scalars are f32 (Note [bf16 activations on the CPU]'s load/store).
template <typename T>
void newton_schulz_impl(float* px, int64_t rows, int64_t cols, int steps) {
  const bool transposed = rows > cols;
  const int64_t m = transposed ? cols : rows, n = transposed ? rows : cols;  // X is [m, n], m <= n
  const int64_t mn = m * n, mm = m * m;
  thread_local std::vector<T> xs, as, cas, bs, bxs;  // reused across calls; they only grow
  // Pointers, not the thread_locals' names, inside the parallel loops (each worker has its own).
  T *X = grown(xs, mn), *A = grown(as, mm), *cA = grown(cas, mm), *B = grown(bs, mm), *BX = grown(bxs, mn);

  // X = px (transposed), rounded to T; BX is free until the first step.
  T* const converted = transposed ? BX : X;
#pragma omp parallel for simd if (mn > kParallelGrain)
  for (int64_t i = 0; i < mn; i++) store(converted, i, px[i]);
  if (transposed) transpose_into(X, static_cast<const T*>(BX), rows, cols);
  double ss = 0;
  for (int64_t i = 0; i < mn; i++) ss += double(load(X, i)) * load(X, i);
  const float norm = round_to<T>(static_cast<float>(std::sqrt(ss)));
  const float denom = round_to<T>(norm + 1e-7f);
#pragma omp parallel for simd if (mn > kParallelGrain)
  for (int64_t i = 0; i < mn; i++) store(X, i, load(X, i) / denom);

  for (int s = 0; s < steps; s++) {
    ns_gemm(true, m, m, n, X, X, n, A);  // A = X X^T
#pragma omp parallel for simd if (mm > kParallelGrain)
    for (int64_t i = 0; i < mm; i++) store(cA, i, kNsC * load(A, i));
    ns_gemm(false, m, m, m, cA, A, m, B);  // (cA) A
#pragma omp parallel for simd if (mm > kParallelGrain)
    for (int64_t i = 0; i < mm; i++) store(B, i, round_to<T>(kNsB * load(A, i)) + load(B, i));
    ns_gemm(false, m, n, m, B, X, n, BX);  // B X
#pragma omp parallel for simd if (mn > kParallelGrain)
    for (int64_t i = 0; i < mn; i++) store(X, i, round_to<T>(kNsA * load(X, i)) + load(BX, i));
  }

  // px = X (transposed back: X is [cols, rows]), widened to f32.
  if (transposed) transpose_into(BX, static_cast<const T*>(X), cols, rows);
  const T* const result = transposed ? BX : X;
#pragma omp parallel for simd if (mn > kParallelGrain)
  for (int64_t i = 0; i < mn; i++) px[i] = load(result, i);
}

}  // namespace

// nanochat runs Newton-Schulz on bf16 tensors. In bf16 mode each step rounds its result to bf16 as
// the corresponding PyTorch bf16 op on CUDA would (GEMMs accumulate in f32 and round once, scalars
// are f32), evaluating b * A + c * A @ A as (b A) + ((c A) A), the order Python gives it.
//
// Several matrices run side by side, one per thread, each with single-threaded GEMMs (an OpenMP
// region inside this one runs on its own thread; oneDNN then runs on the calling thread): the
// model's small products (256 x 256 at depth 4) split poorly over threads. At 2 threads on Zen 5
// that took Newton-Schulz from 55 to 35 ms per step of bench_train_cpu's bf16 Muon model. Each
// matrix then comes out as it does alone on one thread, whichever thread runs it, so the bits do
// not change run to run (NewtonSchulz.ManyMatricesAtOnceEqualEachAloneOnOneThread); a lone
// matrix keeps every thread, whose GEMMs may round differently from one thread's.
void CpuBackend::newton_schulz(const std::vector<Tensor>& xs, int steps, bool bf16) {
  auto one = [&](const Tensor& x) {
    if (bf16)
      newton_schulz_impl<nanoddp::bf16>(x.data<float>(), x.dim(0), x.dim(1), steps);
    else
      newton_schulz_impl<float>(x.data<float>(), x.dim(0), x.dim(1), steps);
  };
  const auto count = static_cast<int64_t>(xs.size());
  if (count < 2 || cpu_threads() < 2) {
    for (const Tensor& x : xs) one(x);
    return;
  }
  // An exception must not leave an OpenMP region: the first is kept and rethrown after it.
  std::exception_ptr failure;
  std::mutex failure_mu;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < count; i++) {
    try {
      one(xs[static_cast<size_t>(i)]);
    } catch (...) {
      std::lock_guard lock(failure_mu);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace nanoddp::ops::cpu
