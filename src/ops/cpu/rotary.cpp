// Rotary position embedding, half-split form (nanochat's): the first and second halves of each
// head vector are rotated as pairs (x1[i], x2[i]) by the angle of (position, i).
#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

void CpuBackend::rotary(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t pos0, bool inverse) {
  const int64_t b = x.dim(0), t = x.dim(1), h = x.dim(2), d = x.dim(3), half = d / 2;
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const float* pc = cos.data<float>();
  const float* ps = sin.data<float>();
  const float sign = inverse ? -1.f : 1.f;  // the inverse rotation is the rotation by -angle
#pragma omp parallel for collapse(2) if (x.numel() > kParallelGrain)
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t ti = 0; ti < t; ti++) {
      const float* cr = pc + (pos0 + ti) * half;
      const float* sr = ps + (pos0 + ti) * half;
      for (int64_t hi = 0; hi < h; hi++) {
        const float* xr = px + ((bi * t + ti) * h + hi) * d;
        float* yr = py + ((bi * t + ti) * h + hi) * d;
#pragma omp simd
        for (int64_t i = 0; i < half; i++) {
          float x1 = xr[i], x2 = xr[i + half], c = cr[i], s = sign * sr[i];
          yr[i] = x1 * c + x2 * s;
          yr[i + half] = -x1 * s + x2 * c;
        }
      }
    }
  }
}

}  // namespace nanoddp::ops::cpu
