// Rotary position embedding, half-split form (nanochat's): the first and second halves of each
// head vector are rotated as pairs (x1[i], x2[i]) by the angle of (position, i). f32 or bf16
// storage (Note [bf16 activations on the CPU] in kernels.h); y may alias x.
#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

namespace {

// One head vector's rotation, kept out of line: inlined into the parallel nest, GCC 12 left the f16
// instantiation scalar ("no vectype" for the cos load; 26 ms per step against f32's 1.4 ms in
// bench_train_cpu --breakdown on Zen 5); out of line every storage type vectorises. A call per
// head vector costs nothing next to its d/2 iterations.
template <typename T>
[[gnu::noinline]] void rotate_row(T* y, const T* x, const float* cr, const float* sr, float sign, int64_t half) {
#pragma omp simd  // y may be x: element i reads and writes only its own pair
  for (int64_t i = 0; i < half; i++) {
    const float x1 = load(x, i), x2 = load(x, i + half), c = cr[i], s = sign * sr[i];
    store(y, i, x1 * c + x2 * s);
    store(y, i + half, -x1 * s + x2 * c);
  }
}

}  // namespace

void CpuBackend::rotary(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t pos0,
                        bool inverse) {
  with_act_type(x.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t b = x.dim(0), t = x.dim(1), h = x.dim(2), d = x.dim(3), half = d / 2;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const float* pc = cos.data<float>();
    const float* ps = sin.data<float>();
    const float sign = inverse ? -1.f : 1.f;  // the inverse rotation is the rotation by -angle
#pragma omp parallel for collapse(2) if (x.numel() > kParallelGrain)
    for (int64_t bi = 0; bi < b; bi++) {
      for (int64_t ti = 0; ti < t; ti++) {
        for (int64_t hi = 0; hi < h; hi++) {
          const int64_t row = ((bi * t + ti) * h + hi) * d;
          rotate_row(py + row, px + row, pc + (pos0 + ti) * half, ps + (pos0 + ti) * half, sign, half);
        }
      }
    }
  });
}

}  // namespace nanoddp::ops::cpu
