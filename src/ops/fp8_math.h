// Note [fp8 tensorwise scaling]
// The arithmetic of ops::matmul_fp8's quantization, shared by its CPU emulation (ops/cpu/fp8.cpp)
// and its CUDA kernels (ops/cuda/fp8.cu), so that both give the same bytes from the same tensor.
// It is nanochat's (nanochat/fp8.py, the tensorwise recipe), per operand and per GEMM:
//   amax  = max |x| over the whole tensor (f32; a NaN anywhere makes it NaN)
//   scale = f32(FP8_MAX / max(f64(amax), 1e-12))  (the division in double, as nanochat does)
//   q     = fp8(clamp(f32(x) * scale, -FP8_MAX, FP8_MAX)), rounded to nearest, ties to even
//   the GEMM multiplies the codes' values and scales the f32 sum by (1 / scale_a) (1 / scale_b).
// Two formats: e4m3fn (4 exponent bits, bias 7, 3 mantissa bits; no infinities, S.1111.111 is NaN;
// largest 448) for inputs and weights, e5m2 (5 exponent bits, bias 15, 2 mantissa bits, IEEE-like
// with infinities; largest 57344) for gradients. Subnormals exist in both.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define NANODDP_FP8_HD __host__ __device__ __forceinline__
#else
#define NANODDP_FP8_HD inline
#endif

namespace nanoddp::ops::fp8 {

// The two formats' fields, as template-free constants indexed by `e5m2` (false: e4m3fn).
struct Format {
  int mantissa_bits;
  int bias;
  uint32_t max_code;  // the largest finite magnitude's code, sign bit clear
  uint32_t nan_code;  // the code a NaN becomes, sign bit clear
  float max_value;
};
NANODDP_FP8_HD Format format(bool e5m2) {
  return e5m2 ? Format{2, 15, 0x7B, 0x7E, 57344.f} : Format{3, 7, 0x7E, 0x7F, 448.f};
}

// The guard under amax (nanochat's EPS): an all-zero tensor gets scale FP8_MAX / 1e-12.
constexpr double kAmaxFloor = 1e-12;

NANODDP_FP8_HD uint32_t float_bits(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}
NANODDP_FP8_HD float bits_float(uint32_t b) {
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

// scale = FP8_MAX / max(amax, 1e-12), divided in double and rounded to f32 once. NaN stays NaN.
NANODDP_FP8_HD float scale_from_amax(float amax, bool e5m2) {
  const double a = static_cast<double>(amax);
  const double guarded = a < kAmaxFloor ? kAmaxFloor : a;  // a NaN fails the comparison and stays
  return static_cast<float>(static_cast<double>(format(e5m2).max_value) / guarded);
}

// x (already multiplied by the scale) as an fp8 code: round to nearest, ties to even, saturating
// at +-max (so +-inf give +-max, as nanochat's clamp before the cast does), NaN to NaN.
// In integers: with e the unbiased exponent of x and sig its 24-bit significand, the code's low
// bits are sig shifted right until one unit is the format's quantum at e (its subnormal quantum
// below the smallest normal exponent); the exponent field is added on top, so a rounding carry
// moves into the exponent as it should.
NANODDP_FP8_HD uint8_t encode(float x, bool e5m2) {
  const Format f = format(e5m2);
  const uint32_t bits = float_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t exp_field = (bits >> 23) & 0xFFu, mant = bits & 0x7FFFFFu;
  if (exp_field == 0xFFu) return static_cast<uint8_t>(sign | (mant != 0 ? f.nan_code : f.max_code));
  if (exp_field == 0) return static_cast<uint8_t>(sign);  // f32 zeros and subnormals: far below fp8's range
  const int e = static_cast<int>(exp_field) - 127;
  const int min_normal = 1 - f.bias;
  const uint64_t sig = mant | 0x800000u;
  const int extra = e < min_normal ? min_normal - e : 0;  // subnormal in fp8: a coarser shift
  const int shift = 23 - f.mantissa_bits + extra;
  const uint32_t base = static_cast<uint32_t>(e < min_normal ? 0 : e - min_normal) << f.mantissa_bits;
  if (shift > 25) return static_cast<uint8_t>(sign);  // below half the smallest subnormal: rounds to 0
  uint64_t q = sig >> shift;
  const uint64_t rem = sig & ((uint64_t{1} << shift) - 1), half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1u) != 0)) q++;
  uint64_t code = base + q;
  if (code > f.max_code) code = f.max_code;
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(code));
}

// The value of a code (exact in f32).
NANODDP_FP8_HD float decode(uint8_t code, bool e5m2) {
  const Format f = format(e5m2);
  const uint32_t mag = code & 0x7Fu;
  const float sign = (code & 0x80u) != 0 ? -1.f : 1.f;
  const uint32_t exp_field = mag >> f.mantissa_bits, mant = mag & ((1u << f.mantissa_bits) - 1);
  const uint32_t exp_all_ones = (1u << (7 - f.mantissa_bits)) - 1;
  if ((e5m2 && exp_field == exp_all_ones && mant != 0) || (!e5m2 && mag == 0x7Fu)) return bits_float(0x7FC00000u);
  if (e5m2 && exp_field == exp_all_ones) return sign * bits_float(0x7F800000u);
  // value = sig * 2^(exp - bias - mantissa_bits), sig with the implicit bit for normals.
  const uint32_t sig = exp_field == 0 ? mant : (mant | (1u << f.mantissa_bits));
  const int exp2 = (exp_field == 0 ? 1 : static_cast<int>(exp_field)) - f.bias - f.mantissa_bits;
  // 2^exp2 built from its bits: exp2 stays within f32's normal range for both formats (>= -17).
  return sign * static_cast<float>(sig) * bits_float(static_cast<uint32_t>(exp2 + 127) << 23);
}

// One element of a quantized tensor: x times its tensor's scale, clamped, encoded.
NANODDP_FP8_HD uint8_t quantize(float x, float scale, bool e5m2) {
  const float m = format(e5m2).max_value;
  float y = x * scale;
  y = y > m ? m : (y < -m ? -m : y);  // NaN passes through both comparisons unchanged
  return encode(y, e5m2);
}

}  // namespace nanoddp::ops::fp8
