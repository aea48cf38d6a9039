// RMSNorm without a weight, rows of length C, over f32 or bf16 storage (Note [bf16 activations on
// the CPU] in kernels.h). Sums in double: C is at most a few thousand, and the extra precision makes
// the result independent of the vector width.
#include <cmath>

#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

void CpuBackend::rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, float eps) {
  with_act_type(x.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t c = x.dim(-1), rows = x.numel() / c;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    float* pr = rstd.data<float>();
#pragma omp parallel for if (rows * c > kParallelGrain)
    for (int64_t r = 0; r < rows; r++) {
      const T* xr = px + r * c;
      double ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < c; j++) {
        const double v = load(xr, j);
        ss += v * v;
      }
      const float s = static_cast<float>(1.0 / std::sqrt(ss / c + eps));
      pr[r] = s;
      T* yr = py + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; j++) store(yr, j, load(xr, j) * s);
    }
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
    for (int64_t r = 0; r < rows; r++) {
      const T* dyr = pdy + r * c;
      const T* yr = py + r * c;
      double dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < c; j++) dot += double(load(dyr, j)) * load(yr, j);
      const float mean = static_cast<float>(dot / c), s = pr[r];
      T* dxr = pdx + r * c;
      if (accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < c; j++) store(dxr, j, load(dxr, j) + s * (load(dyr, j) - load(yr, j) * mean));
      } else {
#pragma omp simd
        for (int64_t j = 0; j < c; j++) store(dxr, j, s * (load(dyr, j) - load(yr, j) * mean));
      }
    }
  });
}

}  // namespace nanoddp::ops::cpu
