// Optimizer updates: AdamW and Muon's Nesterov momentum (elementwise), Newton-Schulz, and the
// 2026 Muon's Polar Express and NorMuon update.
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

// Muon's quintic coefficients.
constexpr float kNsA = 3.4445f, kNsB = -4.7750f, kNsC = 2.0315f;

// c [m, n] = op(a) op(b) on dense T buffers, op(a) [m, k] and op(b) [k, n] stored transposed or
// not: sgemm in f32; in bf16 the bf16 matmul (f32 accumulation, the result rounded once), about
// twice sgemm's rate where the CPU has bf16 dot products or AMX (docs/benchmarks.md).
template <typename T>
void ns_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c) {
  gemm(trans_a, trans_b, m, n, k, 1.f, a, trans_a ? m : k, b, trans_b ? k : n, 0.f, c, n);
}

// The sum of squares of n values of T, in double: 8 partial sums over interleaved lanes, added
// in a fixed order at the end, so that the loop vectorises (a single double accumulator kept it
// scalar) and the result does not depend on the compiler's choices.
template <typename T>
double sum_squares(const T* x, int64_t n) {
  constexpr int kLanes = 8;
  double part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
#pragma omp simd
    for (int l = 0; l < kLanes; l++) {
      const double v = load(x, i + l);
      part[l] += v * v;
    }
  for (; i < n; i++) {
    const double v = load(x, i);
    part[0] += v * v;
  }
  double ss = 0;
  for (double p : part) ss += p;
  return ss;
}

// The iteration on buffers of T (float, or bf16 for nanochat's bf16 Newton-Schulz): every tensor
// op's result is stored as T, scalars are f32 (Note [bf16 activations on the CPU]'s load/store).
// A tall matrix (rows > cols) is iterated on as its transpose X = px^T, as nanochat does, but
// without moving it: X is kept as stored, [cols, rows] read transposed, so A = X X^T is a GEMM of
// the stored matrix's transpose with itself and B X is stored as (px B^T). Transposing there and
// back in tiles took 12% of a 1024 x 256 matrix's bf16 run (perf, Zen 5).
template <typename T>
void newton_schulz_impl(float* px, int64_t rows, int64_t cols, int steps) {
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;  // X is [m, n], m <= n
  const int64_t mn = m * n, mm = m * m;
  thread_local std::vector<T> xs, as, cas, bs, bxs;  // reused across calls; they only grow
  // Pointers, not the thread_locals' names, inside the parallel loops (each worker has its own).
  T *X = grown(xs, mn), *A = grown(as, mm), *cA = grown(cas, mm), *B = grown(bs, mm), *BX = grown(bxs, mn);

  // X = px rounded to T (as stored: [rows, cols]), divided by its norm.
#pragma omp parallel for simd if (mn > kParallelGrain)
  for (int64_t i = 0; i < mn; i++) store(X, i, px[i]);
  const float norm = round_to<T>(static_cast<float>(std::sqrt(sum_squares(X, mn))));
  const float denom = round_to<T>(norm + 1e-7f);
#pragma omp parallel for simd if (mn > kParallelGrain)
  for (int64_t i = 0; i < mn; i++) store(X, i, load(X, i) / denom);

  for (int s = 0; s < steps; s++) {
    // A = X X^T: the stored [rows, cols] is X^T when tall.
    if (tall)
      ns_gemm(true, false, m, m, n, X, X, A);
    else
      ns_gemm(false, true, m, m, n, X, X, A);
#pragma omp parallel for simd if (mm > kParallelGrain)
    for (int64_t i = 0; i < mm; i++) store(cA, i, kNsC * load(A, i));
    ns_gemm(false, false, m, m, m, cA, A, B);  // (cA) A
#pragma omp parallel for simd if (mm > kParallelGrain)
    for (int64_t i = 0; i < mm; i++) store(B, i, round_to<T>(kNsB * load(A, i)) + load(B, i));
    // B X, stored as X is: (B X)^T = X^T B^T when tall.
    if (tall)
      ns_gemm(false, true, n, m, m, X, B, BX);
    else
      ns_gemm(false, false, m, n, m, B, X, BX);
#pragma omp parallel for simd if (mn > kParallelGrain)
    for (int64_t i = 0; i < mn; i++) store(X, i, round_to<T>(kNsA * load(X, i)) + load(BX, i));
  }

  // px = X, widened to f32.
#pragma omp parallel for simd if (mn > kParallelGrain)
  for (int64_t i = 0; i < mn; i++) px[i] = load(X, i);
}

// Polar Express on buffers of T, with nanochat's rounding points (see newton_schulz_impl): unlike
// Newton-Schulz, a tall matrix is not transposed but iterated from the right, X = a X + X B with
// A = X^T X, as nanochat's tall branch does; and B = b A + c (A A) squares A before scaling it.
// X [rows, cols] as stored; A, AA, B [m, m] and XB like X, m = min(rows, cols).
template <typename T>
void polar_express_impl(float* px, int64_t rows, int64_t cols, int steps) {
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  const int64_t mn = m * n, mm = m * m;
  thread_local std::vector<T> xs, as, aas, bs, xbs;  // reused across calls; they only grow
  T *X = grown(xs, mn), *A = grown(as, mm), *AA = grown(aas, mm), *B = grown(bs, mm), *XB = grown(xbs, mn);

  // X = px rounded to T, divided by round(round(||X|| * 1.01) + 1e-6): nanochat's safety margin keeps
  // every singular value below 1 / 1.01, inside the interval the coefficients were fitted on.
#pragma omp parallel for simd if (mn > kParallelGrain)
  for (int64_t i = 0; i < mn; i++) store(X, i, px[i]);
  const float norm = round_to<T>(static_cast<float>(std::sqrt(sum_squares(X, mn))));
  const float denom = round_to<T>(round_to<T>(norm * 1.01f) + 1e-6f);
#pragma omp parallel for simd if (mn > kParallelGrain)
  for (int64_t i = 0; i < mn; i++) store(X, i, load(X, i) / denom);

  for (int s = 0; s < steps; s++) {
    const float a = kPolarExpressCoeffs[s][0], b = kPolarExpressCoeffs[s][1], c = kPolarExpressCoeffs[s][2];
    if (tall)
      ns_gemm(true, false, m, m, n, X, X, A);  // A = X^T X
    else
      ns_gemm(false, true, m, m, n, X, X, A);  // A = X X^T
    ns_gemm(false, false, m, m, m, A, A, AA);
#pragma omp parallel for simd if (mm > kParallelGrain)
    for (int64_t i = 0; i < mm; i++) store(B, i, round_to<T>(b * load(A, i)) + round_to<T>(c * load(AA, i)));
    if (tall)
      ns_gemm(false, false, n, m, m, X, B, XB);  // X B
    else
      ns_gemm(false, false, m, n, m, B, X, XB);  // B X
#pragma omp parallel for simd if (mn > kParallelGrain)
    for (int64_t i = 0; i < mn; i++) store(X, i, round_to<T>(a * load(X, i)) + load(XB, i));
  }
#pragma omp parallel for simd if (mn > kParallelGrain)
  for (int64_t i = 0; i < mn; i++) px[i] = load(X, i);
}

// one(x) for each x of xs: side by side, one matrix per thread, when there are several (see below).
template <typename Fn>
void each_matrix(const std::vector<Tensor>& xs, Fn&& one) {
  const auto count = static_cast<int64_t>(xs.size());
  if (count < 2 || cpu_threads() < 2) {
    for (const Tensor& x : xs) one(x);
    return;
  }
  parallel_each(count, [&](int64_t i) { one(xs[static_cast<size_t>(i)]); });
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
  each_matrix(xs, one);
}

// nanochat's 2026 Muon orthogonalises with Polar Express in bf16 (f32 where it computes in f32);
// the matrices of a shape run side by side as newton_schulz's do.
void CpuBackend::polar_express(const std::vector<Tensor>& xs, int steps, bool bf16) {
  each_matrix(xs, [&](const Tensor& x) {
    if (bf16)
      polar_express_impl<nanoddp::bf16>(x.data<float>(), x.dim(0), x.dim(1), steps);
    else
      polar_express_impl<float>(x.data<float>(), x.dim(0), x.dim(1), steps);
  });
}

namespace {

// NorMuon's factored second moment and rescale (ops.h): from u [k], the mean square of g along
// the reduced dim (`red` elements), and v [k], scale [k] = rsqrt(max(v, 1e-10)) * ||g|| / ||g'||
// where ||g||^2 = red sum(u) and ||g'||^2 = red sum(u rsqrt(..)^2), each clamped as nanochat does.
// v is updated on the way. Sums in double, in index order.
void normuon_scales(const float* u, float* v, float* scale, int64_t k, int64_t red, float beta2) {
  double norm_sq = 0, new_sq = 0;
  for (int64_t i = 0; i < k; i++) {
    norm_sq += u[i];
    v[i] = lerp(v[i], u[i], 1.f - beta2);
    const float step = 1.f / std::sqrt(std::max(v[i], 1e-10f));
    scale[i] = step;
    new_sq += double(u[i] * float(red)) * double(step * step);
  }
  const float norm = static_cast<float>(std::sqrt(norm_sq * double(red)));
  const float ratio = norm / std::max(static_cast<float>(std::sqrt(new_sq)), 1e-10f);
  for (int64_t i = 0; i < k; i++) scale[i] *= ratio;
}

}  // namespace

// NorMuon (Li et al. 2025) as nanochat's 2026 Muon applies it after orthogonalisation: each row
// (or column, for a wide matrix) gets an Adam-like step size from its own mean square, and the
// whole update is rescaled to keep the orthogonalised update's norm. Then the cautious update:
// weight decay only where the scaled update and the parameter agree in sign (g' p >= 0).
// p, g [rows, cols]; v [rows] when rows >= cols, else [cols].
void CpuBackend::normuon_update(const Tensor& p, const Tensor& g, const Tensor& v, float lr, float weight_decay,
                                float beta2) {
  const int64_t rows = p.dim(0), cols = p.dim(1);
  const bool per_row = rows >= cols;
  const int64_t k = per_row ? rows : cols, red = per_row ? cols : rows;
  float* pp = p.data<float>();
  const float* pg = g.data<float>();
  std::vector<double> acc(static_cast<size_t>(k), 0.0);  // sums of squares, [k]
  std::vector<float> u(static_cast<size_t>(k)), scale(static_cast<size_t>(k));
  if (per_row) {
#pragma omp parallel for if (rows * cols > kParallelGrain)
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) acc[r] += double(pg[r * cols + c]) * pg[r * cols + c];
  } else {
    for (int64_t r = 0; r < rows; r++)
#pragma omp simd
      for (int64_t c = 0; c < cols; c++) acc[c] += double(pg[r * cols + c]) * pg[r * cols + c];
  }
  for (int64_t i = 0; i < k; i++) u[i] = static_cast<float>(acc[i] / double(red));
  normuon_scales(u.data(), v.data<float>(), scale.data(), k, red, beta2);
  const float lr_wd = lr * weight_decay;
#pragma omp parallel for if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      const int64_t i = r * cols + c;
      const float gi = pg[i] * scale[per_row ? r : c];
      const float decay = gi * pp[i] >= 0.f ? lr_wd * pp[i] : 0.f;
      pp[i] = pp[i] - (lr * gi + decay);
    }
}

}  // namespace nanoddp::ops::cpu
