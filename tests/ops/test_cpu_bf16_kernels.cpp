// The CPU kernels with bf16 and f16 activations (Note [bf16 activations on the CPU] in ops/cpu/kernels.h)
// against their f32 twins run on the very same bf16 values. A bf16 kernel loads into f32, computes
// what the f32 kernel computes and rounds once when it stores, so its result must be the f32 twin's
// result rounded to bf16. The comparison allows one bf16 ulp in a few elements: the compiler may
// fuse a multiply-add into an FMA in one instantiation of a loop and not the other (one f32 ulp of
// difference), which flips a bf16 rounding when the f32 value sits on a rounding boundary. It does
// not allow more: a kernel that rounded an intermediate value (or forgot to round, or rounded
// twice) differs by an ulp in a large share of the elements.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "ops/backend.h"
#include "ops/cpu/kernels.h"
#include "ops/ops.h"

namespace nanoddp {
namespace {

using testing::max_rel_error;
using testing::randint;
using testing::randn;
using testing::vec;

Tensor to_bf16(const Tensor& f, DType reduced = DType::BF16) {
  Tensor t = Tensor::empty(f.shape(), reduced);
  ops::cast(t, f);
  return t;
}

Tensor to_f32(const Tensor& b) {
  Tensor t = Tensor::empty(b.shape(), DType::F32);
  ops::cast(t, b);
  return t;
}

// A bf16-valued random tensor, as bf16 and as its exact f32 twin.
struct Pair {
  Tensor bf, f;
};
Pair pair(const Shape& shape, uint64_t seed, float std = 1.f, DType reduced = DType::BF16) {
  Tensor b = to_bf16(randn(shape, seed, std), reduced);
  return {b, to_f32(b)};
}

// The bits of x rounded to a reduced type, and of an element of a reduced tensor.
int32_t rounded_bits(float x, DType t) { return t == DType::BF16 ? f32_to_bf16(x).bits : f32_to_f16(x).bits; }
int32_t element_bits(const Tensor& t, int64_t i) {
  return t.dtype() == DType::BF16 ? t.data<bf16>()[i].bits : t.data<f16>()[i].bits;
}

// got (bf16) is want (f32) rounded once: at most one ulp apart anywhere, and exactly equal in all
// but 1% of the elements (see the header for why not all).
void expect_rounded_once(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_TRUE(got.dtype() == DType::BF16 || got.dtype() == DType::F16);
  ASSERT_EQ(want.dtype(), DType::F32);
  ASSERT_EQ(got.numel(), want.numel());
  int64_t differ = 0, worst = 0;
  for (int64_t i = 0; i < got.numel(); i++) {
    const int32_t g = element_bits(got, i), w = rounded_bits(want.data<float>()[i], got.dtype());
    if (g == w) continue;
    differ++;
    // Same sign: the bit patterns of neighbouring bf16 values differ by one.
    worst = std::max<int64_t>(worst, ((g ^ w) & 0x8000) ? 1 << 16 : std::abs(g - w));
  }
  EXPECT_LE(worst, 1) << what << ": a " << dtype_name(got.dtype()) << " result more than one ulp from the rounded "
                      << "f32 result";
  EXPECT_LE(differ * 100, got.numel()) << what << ": " << differ << " of " << got.numel()
                                        << " elements differ from the rounded f32 result";
}

// bf16, and f16 (--dtype fp16) through the same kernels.
class ReducedKernels : public ::testing::TestWithParam<DType> {};

TEST_P(ReducedKernels, ElementwiseOpsRoundTheirF32ResultOnce) {
  const DType rt = GetParam();
  const Shape s{3000};
  Pair x = pair(s, 1, 1.f, rt), y = pair(s, 2, 1.f, rt), dy = pair(s, 3, 1.f, rt);
  // relu^2 forward and backward (in place, as the model calls it).
  Tensor yb = Tensor::empty(s, rt), yf = Tensor::empty(s, DType::F32);
  ops::relu2_forward(yb, x.bf);
  ops::relu2_forward(yf, x.f);
  expect_rounded_once(yb, yf, "relu2_forward");
  ops::relu2_backward(dy.bf, dy.bf, x.bf);
  ops::relu2_backward(dy.f, dy.f, x.f);
  expect_rounded_once(dy.bf, dy.f, "relu2_backward");
  // axpy, scale and fill.
  ops::axpy(y.bf, x.bf, 0.3f);
  ops::axpy(y.f, x.f, 0.3f);
  expect_rounded_once(y.bf, y.f, "axpy");
  ops::scale(x.bf, 1.7f);
  ops::scale(x.f, 1.7f);
  expect_rounded_once(x.bf, x.f, "scale");
  ops::fill(x.bf, 0.1f);
  ops::fill(x.f, 0.1f);
  expect_rounded_once(x.bf, x.f, "fill");
}

TEST_P(ReducedKernels, RmsNormForwardAndBackwardRoundOnce) {
  const DType rt = GetParam();
  const int64_t rows = 37, c = 96;
  Pair x = pair({rows, c}, 4, 3.f, rt), dy = pair({rows, c}, 5, 1.f, rt), dx = pair({rows, c}, 6, 1.f, rt);
  Tensor yb = Tensor::empty({rows, c}, rt), yf = Tensor::empty({rows, c}, DType::F32);
  Tensor rb = Tensor::empty({rows}, DType::F32), rf = Tensor::empty({rows}, DType::F32);
  ops::rmsnorm_forward(yb, rb, x.bf, 1e-6f);
  ops::rmsnorm_forward(yf, rf, x.f, 1e-6f);
  expect_rounded_once(yb, yf, "rmsnorm_forward");
  EXPECT_EQ(vec(rb), vec(rf));  // rstd is f32 in both: the same sums of the same values
  // The backward reads the stored (rounded) y: give the f32 twin the same values.
  const Tensor y_same = to_f32(yb);
  ops::rmsnorm_backward(dx.bf, dy.bf, yb, rb, /*accumulate=*/true);
  ops::rmsnorm_backward(dx.f, dy.f, y_same, rf, true);
  expect_rounded_once(dx.bf, dx.f, "rmsnorm_backward accumulate");
  ops::rmsnorm_backward(dy.bf, dy.bf, yb, rb, false);  // in place, as for the QK norms
  ops::rmsnorm_backward(dy.f, dy.f, y_same, rf, false);
  expect_rounded_once(dy.bf, dy.f, "rmsnorm_backward in place");
}

// Out of place and in place (as the model calls it). Head size 80: a 40-pair half runs both the
// vector body and the tail of the rotation loop.
TEST_P(ReducedKernels, RotaryRoundsOnce) {
  const DType rt = GetParam();
  const int64_t b = 2, t = 9, h = 3, d = 80, half = d / 2;
  Tensor cos = Tensor::empty({t + 4, half}, DType::F32), sin = Tensor::empty({t + 4, half}, DType::F32);
  for (int64_t i = 0; i < cos.numel(); i++) {
    cos.data<float>()[i] = round_to_bf16(std::cos(0.1f * static_cast<float>(i)));
    sin.data<float>()[i] = round_to_bf16(std::sin(0.1f * static_cast<float>(i)));
  }
  for (bool inverse : {false, true}) {
    const std::string what = inverse ? "rotary inverse" : "rotary";
    Pair x = pair({b, t, h, d}, 7, 1.f, rt);
    Tensor yb = Tensor::empty(x.bf.shape(), rt), yf = Tensor::empty(x.f.shape(), DType::F32);
    ops::rotary(yb, x.bf, cos, sin, 3, inverse);
    ops::rotary(yf, x.f, cos, sin, 3, inverse);
    expect_rounded_once(yb, yf, what.c_str());
    ops::rotary(x.bf, x.bf, cos, sin, 3, inverse);
    EXPECT_EQ(vec(to_f32(x.bf)), vec(to_f32(yb))) << what << " in place";
  }
}

TEST(Bf16Kernels, EmbeddingCopiesRowsAndScattersIntoF32) {
  const int64_t v = 11, c = 70, n = 40;
  Pair table = pair({v, c}, 8), dout = pair({n, c}, 9);
  Tensor ids = randint({n}, 10, 0, v);
  Tensor ob = Tensor::empty({n, c}, DType::BF16), of = Tensor::empty({n, c}, DType::F32);
  ops::embedding_forward(ob, table.bf, ids);
  ops::embedding_forward(of, table.f, ids);
  EXPECT_EQ(vec(ob), vec(of));  // a copy: exact
  Tensor gb = Tensor::zeros({v, c}, DType::F32), gf = Tensor::zeros({v, c}, DType::F32);
  ops::embedding_backward(gb, dout.bf, ids);
  ops::embedding_backward(gf, dout.f, ids);
  EXPECT_EQ(vec(gb), vec(gf));  // f32 sums of the same values in the same order
}

TEST_P(ReducedKernels, CrossEntropyLossesAreF32AndTheGradientIsRoundedOnce) {
  const int64_t n = 23, vpad = 128, vocab = 100;
  Pair logits = pair({n, vpad}, 11, 8.f, GetParam());
  Tensor targets = randint({n}, 12, 0, vocab);
  targets.data<int32_t>()[5] = -1;
  Tensor lb = Tensor::empty({n}, DType::F32), lf = Tensor::empty({n}, DType::F32);
  ops::softcap_cross_entropy(lb, logits.bf, targets, vocab, 15.f, 0.5f);
  ops::softcap_cross_entropy(lf, logits.f, targets, vocab, 15.f, 0.5f);
  EXPECT_EQ(vec(lb), vec(lf));
  expect_rounded_once(logits.bf, logits.f, "softcap_cross_entropy gradient");
}

// GEMMs: f32 accumulation of the exact products of the reduced values, one rounding of the result
// (bf16 on oneDNN's matmul primitive, f16 widened to f32 for sgemm). Against the double-precision
// product: an f32 result within k * 2^-24 of the largest partial sums (k = 96: ~6e-6, 2e-5 allowed);
// a reduced result also within half an ulp, 2^-9 (bf16) or 2^-12 (f16) of each element, allowed
// twice that.
TEST_P(ReducedKernels, MatmulAccumulatesInF32AndRoundsOnce) {
  const DType rt = GetParam();
  const int64_t m = 37, n = 29, k = 96;
  for (auto [ta, tb] : {std::pair{false, true}, std::pair{true, false}}) {
    Pair a = pair(ta ? Shape{k, m} : Shape{m, k}, 30, 1.f, rt), b = pair(tb ? Shape{n, k} : Shape{k, n}, 31, 1.f, rt);
    const auto want = reference::matmul(vec(a.f), ta, vec(b.f), tb, m, n, k);
    Tensor cf = Tensor::empty({m, n}, DType::F32), cr = Tensor::empty({m, n}, rt);
    ops::matmul(cf, a.bf, ta, b.bf, tb);
    ops::matmul(cr, a.bf, ta, b.bf, tb);
    EXPECT_LT(max_rel_error(vec(cf), want), 2e-5);
    EXPECT_LT(max_rel_error(vec(cr), want), rt == DType::BF16 ? 4e-3 : 5e-4);
    // beta = 1 into a reduced output: the sum is formed in f32 and rounded once.
    Tensor acc = to_bf16(randn({m, n}, 32), rt);
    const auto before = vec(acc);
    ops::matmul(acc, a.bf, ta, b.bf, tb, 1.f, 1.f);
    auto want_acc = want;
    for (size_t i = 0; i < want_acc.size(); i++) want_acc[i] += before[i];
    EXPECT_LT(max_rel_error(vec(acc), want_acc), rt == DType::BF16 ? 4e-3 : 5e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ReducedKernels, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// fp16's conversion (core/dtype.h) at its edges, against values worked out by hand.
TEST(F16, ConversionRoundsToNearestEvenOverflowsToInfinityAndKeepsSubnormals) {
  auto bits = [](float x) { return f32_to_f16(x).bits; };
  EXPECT_EQ(bits(1.f), 0x3c00);
  EXPECT_EQ(bits(-2.f), 0xc000);
  EXPECT_EQ(bits(65504.f), 0x7bff);             // the largest finite fp16
  EXPECT_EQ(bits(65519.f), 0x7bff);             // below the midpoint to 65536: stays finite
  EXPECT_EQ(bits(65520.f), 0x7c00);             // the midpoint ties to even: infinity
  EXPECT_EQ(bits(1e6f), 0x7c00);
  EXPECT_EQ(bits(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_EQ(bits(1.f + 1.f / 2048), 0x3c00);    // half an ulp above 1: ties to even (down)
  EXPECT_EQ(bits(1.f + 3.f / 2048), 0x3c02);    // one and a half ulps: ties to even (up)
  EXPECT_EQ(bits(5.9604645e-08f), 0x0001);      // 2^-24, the smallest subnormal
  EXPECT_EQ(bits(2.9802322e-08f), 0x0000);      // 2^-25: ties to even, zero
  EXPECT_EQ(bits(6.1035156e-05f), 0x0400);      // 2^-14, the smallest normal
  EXPECT_EQ(bits(6.0975552e-05f), 0x03ff);      // the largest subnormal
  // Every fp16 value widens to the value its fields define, (-1)^s (1 + m/1024) 2^(e-15) or, with
  // e = 0, (-1)^s m 2^-24 (exact in double and in f32); e = 31 is infinity or NaN. And it survives
  // the round trip f16 -> f32 -> f16.
  for (uint32_t h = 0; h < 0x10000; h++) {
    const f16 x{static_cast<uint16_t>(h)};
    const float f = f16_to_f32(x);
    const uint32_t s = h >> 15, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) {
      ASSERT_TRUE(m == 0 ? std::isinf(f) && std::signbit(f) == (s == 1) : std::isnan(f)) << std::hex << h;
      if (m != 0) continue;
    } else {
      const double magnitude = e == 0 ? std::ldexp(m, -24) : std::ldexp(1.0 + m / 1024.0, static_cast<int>(e) - 15);
      ASSERT_EQ(static_cast<double>(f), s ? -magnitude : magnitude) << std::hex << h;
      ASSERT_EQ(std::signbit(f), s == 1) << std::hex << h;  // -0 stays -0
    }
    ASSERT_EQ(f32_to_f16(f).bits, h) << std::hex << h;
  }
}

#ifdef __FLT16_MAX__
// Our conversions against the compiler's own _Float16 (GCC's: F16C's vcvtps2ph/vcvtph2ps or
// libgcc's soft-float routines), an independent implementation of the same IEEE rounding, on 17
// million floats spread over every exponent and sign (every 251st bit pattern) plus every float
// within 64 ulps of each fp16 rounding midpoint and overflow edge. Exact: both round to nearest
// even; only NaN payloads may differ, so NaN is checked as NaN.
TEST(F16, ConversionsAgreeWithTheCompilersFloat16) {
  auto check = [](uint32_t bits) {
    const float x = std::bit_cast<float>(bits);
    const auto want = static_cast<_Float16>(x);
    const f16 got = f32_to_f16(x);
    if (std::isnan(x)) return std::isnan(f16_to_f32(got));
    return std::bit_cast<uint16_t>(want) == got.bits;
  };
  int64_t wrong = 0;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 251) wrong += !check(static_cast<uint32_t>(b));
  for (uint32_t h = 0; h < 0x7c00; h++) {
    // The midpoint above fp16 value h, in f32 (exact: 11 significant bits plus one).
    const float mid = static_cast<float>(
        (static_cast<double>(f16_to_f32(f16{static_cast<uint16_t>(h)})) +
         static_cast<double>(h == 0x7bff ? 65536.f : f16_to_f32(f16{static_cast<uint16_t>(h + 1)}))) / 2);
    const uint32_t mb = std::bit_cast<uint32_t>(mid);
    for (uint32_t d = 0; d < 128; d++) {
      wrong += !check(mb - 64 + d);
      wrong += !check((mb - 64 + d) | 0x80000000u);
    }
  }
  EXPECT_EQ(wrong, 0);
  for (uint32_t h = 0; h < 0x10000; h++) {  // and widening, every value
    const f16 x{static_cast<uint16_t>(h)};
    const float want = static_cast<float>(std::bit_cast<_Float16>(x.bits));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f16_to_f32(x)));
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(f16_to_f32(x)), std::bit_cast<uint32_t>(want)) << std::hex << h;
    }
  }
}
#endif

// The array conversions on the CPU's own instructions (ops/cpu/convert.cpp), which the f16 kernels
// use, give exactly the portable conversions' values: every f16 widened, and f32 inputs at every
// f16 rounding midpoint and its neighbours plus a stride through all 2^32 patterns (the same set
// as above), narrowed and rounded in place. Array lengths that are not a multiple of the vector
// width take the scalar tail too. The one allowed difference: a NaN's payload (NaN stays NaN).
TEST(F16, ArrayConversionsEqualThePortableOnes) {
  std::vector<f16> halves(0x10000 + 5);
  for (size_t h = 0; h < halves.size(); h++) halves[h].bits = static_cast<uint16_t>(h);
  std::vector<float> widened(halves.size());
  ops::cpu::widen_f16(widened.data(), halves.data(), static_cast<int64_t>(halves.size()));
  for (size_t h = 0; h < halves.size(); h++) {
    const float want = f16_to_f32(halves[h]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(widened[h])) << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(widened[h]), std::bit_cast<uint32_t>(want)) << std::hex << h;
    }
  }
  std::vector<float> floats;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 251)
    floats.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (uint32_t h = 0; h < 0x7c00; h++) {
    const double lo = f16_to_f32(f16{static_cast<uint16_t>(h)});
    const double hi = h == 0x7bff ? 65536.0 : f16_to_f32(f16{static_cast<uint16_t>(h + 1)});
    const uint32_t mb = std::bit_cast<uint32_t>(static_cast<float>((lo + hi) / 2));
    for (uint32_t d = 0; d < 8; d++) {
      floats.push_back(std::bit_cast<float>(mb - 4 + d));
      floats.push_back(-std::bit_cast<float>(mb - 4 + d));
    }
  }
  floats.push_back(1.f);  // an odd length: the scalar tail runs
  const auto n = static_cast<int64_t>(floats.size());
  std::vector<f16> narrowed(floats.size());
  ops::cpu::narrow_f16(narrowed.data(), floats.data(), n);
  std::vector<float> rounded = floats;
  ops::cpu::round_f16(rounded.data(), n);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; i++) {
    const f16 want = f32_to_f16(floats[i]);
    if (std::isnan(floats[i])) {
      wrong += !std::isnan(f16_to_f32(narrowed[i])) || !std::isnan(rounded[i]);
    } else {
      wrong += narrowed[i].bits != want.bits;
      wrong += std::bit_cast<uint32_t>(rounded[i]) != std::bit_cast<uint32_t>(f16_to_f32(want));
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << n << " values";
}

// bf16_gemm on views: operands and result rows with a leading dimension wider than the view, as
// attention passes one head of a [B, T, H, D] tensor. Only the view's own elements may be read or
// written: the columns beyond it hold a sentinel that must survive, in every transpose, with an f32
// and a bf16 result, beta 0 and 1. Values are held to MatmulAccumulatesInF32AndRoundsOnce's bounds
// (f32: k 2^-24 of the largest partial sums; bf16: plus half an ulp, 2^-9, allowed twice that).
// Run again with oneDNN capped below AVX512-BF16 (ctest's reduced_kernels_widened), where the
// operands are widened to f32 instead.
TEST(Bf16Kernels, GemmOnViewsTouchesOnlyTheViews) {
  const int64_t m = 19, n = 23, k = 40, pad = 7;
  const float sentinel = -1024.f;  // exact in bf16
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool c_bf16 : {false, true})
        for (float beta : {0.f, 1.f}) {
          const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
          const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
          Pair a = pair({a_rows, lda}, 40), b = pair({b_rows, ldb}, 41);
          std::vector<float> dense_a, dense_b;  // the views' own elements
          for (int64_t r = 0; r < a_rows; r++)
            for (int64_t j = 0; j < a_cols; j++) dense_a.push_back(a.f.data<float>()[r * lda + j]);
          for (int64_t r = 0; r < b_rows; r++)
            for (int64_t j = 0; j < b_cols; j++) dense_b.push_back(b.f.data<float>()[r * ldb + j]);
          std::vector<double> want = reference::matmul(std::vector<double>(dense_a.begin(), dense_a.end()), ta,
                                                       std::vector<double>(dense_b.begin(), dense_b.end()), tb, m,
                                                       n, k);
          // The result buffer: 0.5 in the view (added with beta 1), the sentinel beyond it.
          std::vector<float> c32(m * ldc);
          std::vector<bf16> c16(m * ldc);
          for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < ldc; j++) {
              const float x = j < n ? 0.5f : sentinel;
              c32[r * ldc + j] = x;
              c16[r * ldc + j] = f32_to_bf16(x);
              if (j < n && beta != 0.f) want[r * n + j] += 0.5;
            }
          ops::cpu::bf16_gemm(ta, tb, m, n, k, 1.f, a.bf.data<bf16>(), lda, b.bf.data<bf16>(), ldb, beta,
                              c_bf16 ? static_cast<void*>(c16.data()) : c32.data(), ldc, c_bf16);
          std::vector<double> got;
          int64_t touched = 0;
          for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < ldc; j++) {
              const float x = c_bf16 ? bf16_to_f32(c16[r * ldc + j]) : c32[r * ldc + j];
              if (j < n)
                got.push_back(x);
              else
                touched += x != sentinel;
            }
          SCOPED_TRACE(::testing::Message() << "ta " << ta << " tb " << tb << " bf16 out " << c_bf16 << " beta "
                                            << beta);
          EXPECT_EQ(touched, 0);
          EXPECT_LT(max_rel_error(got, want), c_bf16 ? 4e-3 : 2e-5);
        }
}

// Attention rounds more than its output: P and dS enter GEMMs in the reduced type (where the CUDA
// flash kernels round them for the tensor cores), so the result is compared with the f32 twin by
// size, not bit for bit. In bf16 each probability carries a relative rounding error of at most
// 2^-9 and each output row is a convex combination, so the forward is within 2^-9 (P) + 2^-9 (the
// output's own rounding) ~ 4e-3 of the largest output; the backward's dV and dK sum products of one
// rounded factor, dQ too, within ~2 x 2^-9 plus their rounding: 1e-2 of the largest covers both
// with room, while a kernel that mixes up heads or keys is off by O(1). fp16 rounds to 2^-12, 8
// times finer: the same bounds divided by 4 (1e-3, 2.5e-3) keep 2x room.
void attention_follows_its_f32_twin(DType rt, int64_t window) {
  const double fwd_bound = rt == DType::BF16 ? 4e-3 : 1e-3, bwd_bound = rt == DType::BF16 ? 1e-2 : 2.5e-3;
  const int64_t b = 2, t = 150, hq = 4, hkv = 2, d = 32;
  Pair q = pair({b, t, hq, d}, 13, 1.f, rt), k = pair({b, t, hkv, d}, 14, 1.f, rt),
       v = pair({b, t, hkv, d}, 15, 1.f, rt), dout = pair({b, t, hq, d}, 16, 1.f, rt);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  Tensor ob = Tensor::empty(q.bf.shape(), rt), of = Tensor::empty(q.f.shape(), DType::F32);
  Tensor lb = Tensor::empty({b, hq, t}, DType::F32), lf = Tensor::empty({b, hq, t}, DType::F32);
  ops::attention_forward(ob, lb, q.bf, k.bf, v.bf, t, scale, window);
  ops::attention_forward(of, lf, q.f, k.f, v.f, t, scale, window);
  EXPECT_LT(max_rel_error(vec(ob), vec(of)), fwd_bound);
  // The scores and their log-sum-exp are f32 in both, from the same bf16 values, but bf16 heads go
  // to oneDNN's bf16 matmul, which may sum the 32 exact products of a score in another order than
  // sgemm: each score then moves by at most ~32 x 2^-24 of its terms' magnitudes (|q k| scale <= ~10
  // here: ~2e-5), and the log-sum-exp by no more than its largest score does. 1e-4 of the largest
  // lse (~5) is 10x that; a wrong key or mask moves it by O(1).
  EXPECT_LT(max_rel_error(vec(lb), vec(lf)), 1e-4);
  // Backward from the same (rounded) output, so only the kernel's own roundings differ.
  const Tensor o_same = to_f32(ob);
  auto grads = [&](DType t_) {
    return std::array<Tensor, 3>{Tensor::empty(q.f.shape(), t_), Tensor::empty(k.f.shape(), t_),
                                 Tensor::empty(v.f.shape(), t_)};
  };
  auto gb = grads(rt), gf = grads(DType::F32);
  ops::attention_backward(gb[0], gb[1], gb[2], dout.bf, q.bf, k.bf, v.bf, ob, lb, scale, window);
  ops::attention_backward(gf[0], gf[1], gf[2], dout.f, q.f, k.f, v.f, o_same, lb, scale, window);
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; i++) EXPECT_LT(max_rel_error(vec(gb[i]), vec(gf[i])), bwd_bound) << names[i];
  // And decoding from a longer cache (kv_len < capacity), as sampling calls it.
  Pair kc = pair({b, t + 10, hkv, d}, 17, 1.f, rt), vc = pair({b, t + 10, hkv, d}, 18, 1.f, rt),
       q1 = pair({b, 3, hq, d}, 19, 1.f, rt);
  Tensor o1b = Tensor::empty(q1.bf.shape(), rt), o1f = Tensor::empty(q1.f.shape(), DType::F32);
  Tensor l1 = Tensor::empty({b, hq, 3}, DType::F32);
  ops::attention_forward(o1b, l1, q1.bf, kc.bf, vc.bf, 40, scale, window);
  ops::attention_forward(o1f, l1, q1.f, kc.f, vc.f, 40, scale, window);
  EXPECT_LT(max_rel_error(vec(o1b), vec(o1f)), fwd_bound);
  std::printf("%s attention (window %lld) against f32: output %.2e, dq/dk/dv %.2e %.2e %.2e\n",
              std::string(dtype_name(rt)).c_str(), static_cast<long long>(window),
              max_rel_error(vec(ob), vec(of)), max_rel_error(vec(gb[0]), vec(gf[0])),
              max_rel_error(vec(gb[1]), vec(gf[1])), max_rel_error(vec(gb[2]), vec(gf[2])));
}

TEST_P(ReducedKernels, AttentionFollowsItsF32TwinWithinTheRoundingOfPAndDs) {
  attention_follows_its_f32_twin(GetParam(), 0);
}

// The same bounds hold with a sliding window of 40 keys back (the second query tile's keys start at
// 88, mid-way through a tile): a row is still a convex combination of many values, so the largest
// output stays near the largest value the bound scales with. A window of 1 averages two values,
// which would leave the bound only relative to the largest value, not output; its masks run the
// same code as 40's and are checked in f32 against the reference (WindowedAttention).
TEST_P(ReducedKernels, WindowedAttentionFollowsItsF32Twin) { attention_follows_its_f32_twin(GetParam(), 40); }

// Decoding from a KV cache (kv_len > the queries) grows the key count by one every token: on the
// bf16 matmul each new shape would JIT a oneDNN primitive kept for the process, so that path runs
// widened to f32 instead and must not add a single GEMM problem, however many tokens it decodes.
// Its output still follows the f32 twin within AttentionFollowsItsF32TwinWithinTheRoundingOfPAndDs's
// bound (4e-3 of the largest output).
TEST(Bf16Kernels, DecodingFromACacheMakesNoNewGemmKernels) {
  const int64_t b = 1, cap = 64, hq = 2, hkv = 1, d = 32;
  Pair kc = pair({b, cap, hkv, d}, 50), vc = pair({b, cap, hkv, d}, 51);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const int64_t before = ops::cpu::reduced_matmul_problems();
  for (int64_t kv_len = 9; kv_len <= 40; kv_len++) {
    Pair q1 = pair({b, 1, hq, d}, 60 + static_cast<uint64_t>(kv_len));
    Tensor ob = Tensor::empty(q1.bf.shape(), DType::BF16), of = Tensor::empty(q1.f.shape(), DType::F32);
    Tensor l = Tensor::empty({b, hq, 1}, DType::F32);
    ops::attention_forward(ob, l, q1.bf, kc.bf, vc.bf, kv_len, scale, 0);
    ops::attention_forward(of, l, q1.f, kc.f, vc.f, kv_len, scale, 0);
    EXPECT_LT(max_rel_error(vec(ob), vec(of)), 4e-3) << "kv_len " << kv_len;
  }
  EXPECT_EQ(ops::cpu::reduced_matmul_problems(), before);
}

}  // namespace
}  // namespace nanoddp
