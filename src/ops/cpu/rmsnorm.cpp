// RMSNorm without a weight, rows of length C, over f32, bf16 or f16 storage (Note [bf16
// activations on the CPU] in kernels.h). Sums in double, in 32 fixed lanes (Note [row reductions in
// fixed lanes] in kernels.h): C is at most a few thousand, and the extra precision keeps the f32
// result of the sum clear of its order.
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

namespace {

// Four AVX-512 registers of doubles: enough independent adds to hide the FMA's latency.
constexpr int kRowLanes = 32;

// One row each, so that f16 can take its own path below.
template <typename T>
float rmsnorm_row(T* y, const T* x, int64_t c, float eps) {
  const double ss = lane_sum<double, kRowLanes>(c, [&](int64_t j) {
    const double v = load(x, j);
    return v * v;
  });
  const float s = static_cast<float>(1.0 / std::sqrt(ss / c + eps));
#pragma omp simd
  for (int64_t j = 0; j < c; j++) store(y, j, load(x, j) * s);
  return s;
}

// dx may be dy: every element is read before it is written, and dy's dot product comes first.
template <typename T>
void rmsnorm_backward_row(T* dx, const T* dy, const T* y, float s, int64_t c, bool accumulate) {
  const double dot = lane_sum<double, kRowLanes>(c, [&](int64_t j) { return double(load(dy, j)) * load(y, j); });
  const float mean = static_cast<float>(dot / c);
  if (accumulate) {
#pragma omp simd
    for (int64_t j = 0; j < c; j++) store(dx, j, load(dx, j) + s * (load(dy, j) - load(y, j) * mean));
  } else {
#pragma omp simd
    for (int64_t j = 0; j < c; j++) store(dx, j, s * (load(dy, j) - load(y, j) * mean));
  }
}

// f16 rows go through f32 scratch on the CPU's conversion instructions (widen_f16): with the
// portable per-element conversions the f16 kernels ran at about 3x f32's (forward 6.1 against 2.1
// ms per step, backward 8.0 against 2.8, bench_train_cpu --breakdown on Zen 5). The values are the
// same: f32 arithmetic on the exactly widened inputs, rounded to f16 once.
float rmsnorm_row(f16* y, const f16* x, int64_t c, float eps) {
  thread_local std::vector<float> buf;
  float* xf = grown(buf, static_cast<size_t>(2 * c));
  float* yf = xf + c;
  widen_f16(xf, x, c);
  const float s = rmsnorm_row(yf, static_cast<const float*>(xf), c, eps);
  narrow_f16(y, yf, c);
  return s;
}

void rmsnorm_backward_row(f16* dx, const f16* dy, const f16* y, float s, int64_t c, bool accumulate) {
  thread_local std::vector<float> buf;
  float* dyf = grown(buf, static_cast<size_t>(3 * c));
  float* yf = dyf + c;
  float* dxf = yf + c;
  widen_f16(dyf, dy, c);  // before dx is written: dx may be dy
  widen_f16(yf, y, c);
  if (accumulate) widen_f16(dxf, dx, c);
  rmsnorm_backward_row(dxf, static_cast<const float*>(dyf), static_cast<const float*>(yf), s, c, accumulate);
  narrow_f16(dx, dxf, c);
}

}  // namespace

void CpuBackend::rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, float eps) {
  with_act_type(x.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t c = x.dim(-1), rows = x.numel() / c;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    float* pr = rstd.data<float>();
#pragma omp parallel for if (rows * c > kParallelGrain)
    for (int64_t r = 0; r < rows; r++) pr[r] = rmsnorm_row(py + r * c, px + r * c, c, eps);
  });
}

// dx may alias dy (the QK norms' backward runs in place): each row reads dy whole before writing.
void CpuBackend::rmsnorm_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd,
                                  bool accumulate) {
  with_act_type(y.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t c = y.dim(-1), rows = y.numel() / c;
    const T* pdy = dy.data<T>();
    const T* py = y.data<T>();
    const float* pr = rstd.data<float>();
    T* pdx = dx.data<T>();
#pragma omp parallel for if (rows * c > kParallelGrain)
    for (int64_t r = 0; r < rows; r++) rmsnorm_backward_row(pdx + r * c, pdy + r * c, py + r * c, pr[r], c, accumulate);
  });
}

}  // namespace nanoddp::ops::cpu
