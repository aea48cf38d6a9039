// FP8 quantization (ops/fp8_math.h, the same source the CUDA kernels compile) against a slow
// reference written here from the formats' definitions: each of the 256 codes' value from its
// fields with ldexp, and rounding as "the nearest of those values, ties to the even code, beyond
// the largest saturated". Then ops::matmul_fp8's CPU emulation against the product of the
// reference's dequantized operands in double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "ops/fp8_math.h"
#include "ops/ops.h"
#include "test_util.h"

namespace nanoddp {
namespace {

namespace fp8 = ops::fp8;

// The value of `code` from its fields: e4m3fn (bias 7, NaN at S.1111.111, no infinities) or e5m2
// (bias 15, IEEE-like: exponent 11111 is infinity or NaN).
double reference_value(int code, bool e5m2) {
  const int mbits = e5m2 ? 2 : 3, ebits = e5m2 ? 5 : 4, bias = e5m2 ? 15 : 7;
  const int sign = code >> 7, exp = (code >> mbits) & ((1 << ebits) - 1), mant = code & ((1 << mbits) - 1);
  const double s = sign ? -1.0 : 1.0;
  if (e5m2 && exp == 31) return mant == 0 ? s * INFINITY : NAN;
  if (!e5m2 && exp == 15 && mant == 7) return NAN;
  if (exp == 0) return s * std::ldexp(mant, 1 - bias - mbits);
  return s * std::ldexp((1 << mbits) + mant, exp - bias - mbits);
}

// Round x to the format by searching every code: NaN to a NaN, |x| at or beyond the largest finite
// value to it (the clamp nanochat applies), else the nearest finite value of x's sign, ties to the
// even code (the even mantissa).
int reference_encode(float x, bool e5m2) {
  if (std::isnan(x)) return -1;  // any NaN code
  const int sign = std::signbit(x) ? 0x80 : 0;
  int best = -1;
  double best_err = INFINITY;
  for (int mag = 0; mag < 128; mag++) {
    const double v = reference_value(sign | mag, e5m2);
    if (!std::isfinite(v)) continue;
    const double err = std::fabs(v - static_cast<double>(x));
    if (err < best_err || (err == best_err && ((sign | mag) & 1) == 0)) {
      best = sign | mag;
      best_err = err;
    }
  }
  const double largest = e5m2 ? 57344.0 : 448.0;
  if (std::fabs(static_cast<double>(x)) >= largest) return sign | (e5m2 ? 0x7B : 0x7E);
  return best;
}

void expect_encodes_like_reference(float x, bool e5m2) {
  const int want = reference_encode(x, e5m2);
  const uint8_t got = fp8::encode(x, e5m2);
  if (want < 0)
    EXPECT_TRUE(std::isnan(fp8::decode(got, e5m2))) << "NaN encoded as " << int(got);
  else
    EXPECT_EQ(int(got), want) << "x = " << x << (e5m2 ? " e5m2" : " e4m3");
}

class Fp8Encoding : public ::testing::TestWithParam<bool> {};  // e5m2 or not

TEST_P(Fp8Encoding, DecodeGivesEveryCodesValue) {
  const bool e5m2 = GetParam();
  for (int code = 0; code < 256; code++) {
    const double want = reference_value(code, e5m2);
    const float got = fp8::decode(static_cast<uint8_t>(code), e5m2);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << code;
    else
      EXPECT_EQ(static_cast<double>(got), want) << code;
  }
  EXPECT_EQ(fp8::decode(e5m2 ? 0x7B : 0x7E, e5m2), fp8::format(e5m2).max_value);
}

// Every finite code's value, the midpoints between neighbours (exact ties) and the floats just
// beside them: the cases where rounding direction and ties to even show.
TEST_P(Fp8Encoding, EncodeRoundsToNearestEvenAtEveryBoundary) {
  const bool e5m2 = GetParam();
  std::vector<double> values;
  for (int mag = 0; mag < 128; mag++) {
    const double v = reference_value(mag, e5m2);
    if (std::isfinite(v)) values.push_back(v);
  }
  for (size_t i = 0; i < values.size(); i++) {
    for (const double sign : {1.0, -1.0}) {
      const float v = static_cast<float>(sign * values[i]);
      expect_encodes_like_reference(v, e5m2);
      if (i + 1 == values.size()) continue;
      const float mid = static_cast<float>(sign * (values[i] + values[i + 1]) / 2);  // exact in f32
      ASSERT_EQ(static_cast<double>(mid), sign * (values[i] + values[i + 1]) / 2);
      for (const float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, static_cast<float>(sign) * INFINITY)})
        expect_encodes_like_reference(x, e5m2);
    }
  }
  // Half the smallest subnormal is a tie between 0 and it: to 0 (even); just above goes up.
  const float half_min = static_cast<float>(values[1] / 2);
  EXPECT_EQ(fp8::encode(half_min, e5m2), 0);
  EXPECT_EQ(fp8::encode(std::nextafter(half_min, 1.f), e5m2), 1);
  EXPECT_EQ(fp8::encode(-half_min, e5m2), 0x80);  // negative zero, as the cast gives
}

TEST_P(Fp8Encoding, EncodeMatchesReferenceOnRandomFloats) {
  const bool e5m2 = GetParam();
  Rng rng(17);
  for (int i = 0; i < 200000; i++) {
    // Log-uniform over 2^-30 .. 2^20: f32 values below, inside and above the format's range.
    const float mag = std::ldexp(1.f + rng.uniform(), static_cast<int>(rng.next_u64() % 51) - 30);
    expect_encodes_like_reference(rng.uniform() < 0.5f ? -mag : mag, e5m2);
  }
}

TEST_P(Fp8Encoding, SpecialValuesSaturateOrStayNaN) {
  const bool e5m2 = GetParam();
  const uint8_t max_code = e5m2 ? 0x7B : 0x7E;
  EXPECT_EQ(fp8::encode(INFINITY, e5m2), max_code);
  EXPECT_EQ(fp8::encode(-INFINITY, e5m2), 0x80 | max_code);
  EXPECT_EQ(fp8::encode(3e38f, e5m2), max_code);
  EXPECT_TRUE(std::isnan(fp8::decode(fp8::encode(NAN, e5m2), e5m2)));
  EXPECT_EQ(fp8::encode(1e-40f, e5m2), 0);  // an f32 subnormal
  EXPECT_EQ(fp8::quantize(1e30f, 1.f, e5m2), max_code);
  EXPECT_TRUE(std::isnan(fp8::decode(fp8::quantize(1.f, NAN, e5m2), e5m2)));
}

// nanochat's scale maps the tensor's largest magnitude onto the format's largest value, so that
// element quantizes to exactly +-max; an all-zero tensor gets the floor's finite scale.
TEST_P(Fp8Encoding, ScaleMapsAmaxOntoTheLargestValue) {
  const bool e5m2 = GetParam();
  const float max_value = fp8::format(e5m2).max_value;
  Rng rng(5);
  for (int i = 0; i < 10000; i++) {
    const float amax = std::ldexp(0.5f + rng.uniform(), static_cast<int>(rng.next_u64() % 60) - 30);
    const float scale = fp8::scale_from_amax(amax, e5m2);
    EXPECT_EQ(fp8::decode(fp8::quantize(amax, scale, e5m2), e5m2), max_value) << amax;
    EXPECT_EQ(fp8::decode(fp8::quantize(-amax, scale, e5m2), e5m2), -max_value) << amax;
  }
  EXPECT_EQ(fp8::scale_from_amax(0.f, e5m2), static_cast<float>(max_value / 1e-12));
  EXPECT_TRUE(std::isnan(fp8::scale_from_amax(NAN, e5m2)));
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Encoding, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "e5m2" : "e4m3"; });

// The reference of matmul_fp8: each operand's codes from reference_encode with nanochat's scale
// (amax in f32, the division in double), their values, the product in double, divided by the scales.
std::vector<double> reference_fp8_matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, bool a_e5m2, bool b_e5m2) {
  const auto dequantized = [](const Tensor& x, bool e5m2, double& scale) {
    const std::vector<float> v = testing::to_vector(x);
    float amax = 0;
    for (float e : v) amax = std::max(amax, std::fabs(e));
    scale = static_cast<float>((e5m2 ? 57344.0 : 448.0) / std::max<double>(amax, 1e-12));
    std::vector<double> q;
    for (float e : v) q.push_back(reference_value(reference_encode(e * static_cast<float>(scale), e5m2), e5m2));
    return q;
  };
  double sa = 0, sb = 0;
  const std::vector<double> qa = dequantized(a, a_e5m2, sa), qb = dequantized(b, b_e5m2, sb);
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1), n = tb ? b.dim(0) : b.dim(1);
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++) s += qa[ta ? p * m + i : i * k + p] * qb[tb ? j * k + p : p * n + j];
      out[i * n + j] = s / (sa * sb);
    }
  return out;
}

// Every layout a Linear layer's three GEMMs use, e5m2 on either side, f32 and bf16 outputs, and
// beta = 1. Tolerances: the emulation multiplies the same codes in f32 in another order, so f32 results
// differ by sum rounding (k = 64 terms: well under 1e-5 of the largest); a bf16 output by its rounding,
// 2^-8 relative.
TEST(Fp8Matmul, CpuEmulationEqualsTheReferenceProduct) {
  const int64_t m = 32, n = 48, k = 64;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const bool a_e5m2 : {false, true}) {
        const Tensor a = testing::randn(ta ? Shape{k, m} : Shape{m, k}, 1, 2.f);
        const Tensor b = testing::randn(tb ? Shape{n, k} : Shape{k, n}, 2, 0.05f);
        const ops::Fp8Gemm how{a_e5m2 ? ops::Fp8Format::E5M2 : ops::Fp8Format::E4M3, ops::Fp8Format::E4M3};
        const std::vector<double> want = reference_fp8_matmul(a, ta, b, tb, a_e5m2, false);
        Tensor out = Tensor::empty({m, n}, DType::F32);
        ops::matmul_fp8(out, a, ta, b, tb, how, 0.f);
        EXPECT_LT(testing::max_rel_error(testing::to_double(out), want), 1e-5) << ta << tb << a_e5m2;
        // beta = 1 adds the product to what out holds.
        Tensor acc = testing::randn({m, n}, 3);
        const std::vector<double> before = testing::to_double(acc);
        ops::matmul_fp8(acc, a, ta, b, tb, how, 1.f);
        std::vector<double> want_acc(want);
        for (size_t i = 0; i < want.size(); i++) want_acc[i] += before[i];
        EXPECT_LT(testing::max_rel_error(testing::to_double(acc), want_acc), 1e-5);
        Tensor out16 = Tensor::empty({m, n}, DType::BF16);
        ops::matmul_fp8(out16, a, ta, b, tb, how, 0.f);
        EXPECT_LT(testing::max_rel_error(testing::to_double(out16), want), 1.0 / 256);
      }
}

// The quantization is real (the result is not the exact product) and as coarse as the format says:
// e4m3 keeps 3 mantissa bits, a rounding error of at most 2^-4 relative per element and about 2.5%
// RMS, so each product term is off by about 3.5% RMS and, with random terms, so is the sum (3.8%
// measured): 10% is a bound with room, 0.1% one that a product without quantization would pass.
TEST(Fp8Matmul, DiffersFromTheExactProductByTheFormatsPrecision) {
  const Tensor a = testing::randn({64, 128}, 4), b = testing::randn({96, 128}, 5);
  Tensor exact = Tensor::empty({64, 96}, DType::F32), q = Tensor::empty({64, 96}, DType::F32);
  ops::matmul(exact, a, false, b, true);
  ops::matmul_fp8(q, a, false, b, true, {}, 0.f);
  const double err = testing::rel_l2(q, exact);
  EXPECT_GT(err, 1e-3);
  EXPECT_LT(err, 0.1);
}

}  // namespace
}  // namespace nanoddp
