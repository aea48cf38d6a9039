// exp and tanh in a form GCC vectorises inside `#pragma omp simd` loops (no calls, no branches).
// libm's scalar expf/tanhf would dominate the soft-capped cross-entropy, which evaluates both
// for every logit: 8M of each per step at vocab 4096 and 2048 tokens.
//
// Both follow the classic Cephes single-precision approximations (about 1-2 ulp on the ranges
// used here): exp by range reduction to r in [-ln2/2, ln2/2], a degree-6 polynomial and a 2^n
// scaling built from the exponent bits; tanh by an odd polynomial below |x| = 0.625 and
// 1 - 2 / (exp(2|x|) + 1) above it.
#pragma once

#include <bit>
#include <cstdint>

namespace nanoddp::ops::cpu {

inline float fast_exp(float x) {
  x = x < -87.33654f ? -87.33654f : (x > 88.37626f ? 88.37626f : x);
  // n = round(x / ln 2): adding and subtracting 1.5 * 2^23 rounds to the nearest integer in the
  // FPU (ties to even) and vectorises, where GCC lowers roundevenf to a library call.
  constexpr float kRound = 12582912.0f;
  float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  // 2^n for n in [-126, 127]: the clamp above keeps n there.
  float scale = std::bit_cast<float>(static_cast<int32_t>(n + 127.0f) << 23);
  return p * scale;
}

inline float fast_tanh(float x) {
  float a = x < 0 ? -x : x;
  // Small |x|: odd polynomial.
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = p * z * x + x;
  // Large |x|: 1 - 2 / (exp(2|x|) + 1), with the sign of x.
  float big = 1.0f - 2.0f / (fast_exp(2.0f * a) + 1.0f);
  big = x < 0 ? -big : big;
  return a < 0.625f ? small : big;
}

}  // namespace nanoddp::ops::cpu
