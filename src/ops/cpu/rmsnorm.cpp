// RMSNorm without a weight, rows of length C. Sums in double: C is at most a few thousand, and the
// extra precision makes the result independent of the vector width.
#include <cmath>

#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

void CpuBackend::rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, float eps) {
  const int64_t c = x.dim(-1), rows = x.numel() / c;
  const float* px = x.data<float>();
  float* py = y.data<float>();
  float* pr = rstd.data<float>();
#pragma omp parallel for if (rows * c > kParallelGrain)
  for (int64_t r = 0; r < rows; r++) {
    const float* xr = px + r * c;
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < c; j++) ss += double(xr[j]) * xr[j];
    float s = static_cast<float>(1.0 / std::sqrt(ss / c + eps));
    pr[r] = s;
    float* yr = py + r * c;
#pragma omp simd
    for (int64_t j = 0; j < c; j++) yr[j] = xr[j] * s;
  }
}

void CpuBackend::rmsnorm_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd, bool accumulate) {
  const int64_t c = y.dim(-1), rows = y.numel() / c;
  const float* pdy = dy.data<float>();
  const float* py = y.data<float>();
  const float* pr = rstd.data<float>();
  float* pdx = dx.data<float>();
#pragma omp parallel for if (rows * c > kParallelGrain)
  for (int64_t r = 0; r < rows; r++) {
    const float* dyr = pdy + r * c;
    const float* yr = py + r * c;
    double dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < c; j++) dot += double(dyr[j]) * yr[j];
    float mean = static_cast<float>(dot / c), s = pr[r];
    float* dxr = pdx + r * c;
    if (accumulate) {
#pragma omp simd
      for (int64_t j = 0; j < c; j++) dxr[j] += s * (dyr[j] - yr[j] * mean);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < c; j++) dxr[j] = s * (dyr[j] - yr[j] * mean);
    }
  }
}

}  // namespace nanoddp::ops::cpu
