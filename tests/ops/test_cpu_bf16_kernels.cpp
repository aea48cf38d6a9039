// The CPU kernels with bf16 activations (Note [bf16 activations on the CPU] in ops/cpu/kernels.h)
// against their f32 twins run on the very same bf16 values. A bf16 kernel loads into f32, computes
// what the f32 kernel computes and rounds once when it stores, so its result must be the f32 twin's
// result rounded to bf16. The comparison allows one bf16 ulp in a few elements: the compiler may
// fuse a multiply-add into an FMA in one instantiation of a loop and not the other (one f32 ulp of
// difference), which flips a bf16 rounding when the f32 value sits on a rounding boundary. It does
// not allow more: a kernel that rounded an intermediate value (or forgot to round, or rounded
// twice) differs by an ulp in a large share of the elements.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>

#include "kernel_test_util.h"
#include "ops/backend.h"
#include "ops/ops.h"

namespace nanoddp {
namespace {

using testing::max_rel_error;
using testing::randint;
using testing::randn;
using testing::vec;

Tensor to_bf16(const Tensor& f) {
  Tensor t = Tensor::empty(f.shape(), DType::BF16);
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
Pair pair(const Shape& shape, uint64_t seed, float std = 1.f) {
  Tensor b = to_bf16(randn(shape, seed, std));
  return {b, to_f32(b)};
}

// got (bf16) is want (f32) rounded once: at most one ulp apart anywhere, and exactly equal in all
// but 1% of the elements (see the header for why not all).
void expect_rounded_once(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.dtype(), DType::BF16);
  ASSERT_EQ(want.dtype(), DType::F32);
  ASSERT_EQ(got.numel(), want.numel());
  int64_t differ = 0, worst = 0;
  for (int64_t i = 0; i < got.numel(); i++) {
    const int32_t g = got.data<bf16>()[i].bits, w = f32_to_bf16(want.data<float>()[i]).bits;
    if (g == w) continue;
    differ++;
    // Same sign: the bit patterns of neighbouring bf16 values differ by one.
    worst = std::max<int64_t>(worst, ((g ^ w) & 0x8000) ? 1 << 16 : std::abs(g - w));
  }
  EXPECT_LE(worst, 1) << what << ": a bf16 result more than one ulp from the rounded f32 result";
  EXPECT_LE(differ * 100, got.numel()) << what << ": " << differ << " of " << got.numel()
                                        << " elements differ from the rounded f32 result";
}

TEST(Bf16Kernels, ElementwiseOpsRoundTheirF32ResultOnce) {
  const Shape s{3000};
  Pair x = pair(s, 1), y = pair(s, 2), dy = pair(s, 3);
  // relu^2 forward and backward (in place, as the model calls it).
  Tensor yb = Tensor::empty(s, DType::BF16), yf = Tensor::empty(s, DType::F32);
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

TEST(Bf16Kernels, RmsNormForwardAndBackwardRoundOnce) {
  const int64_t rows = 37, c = 96;
  Pair x = pair({rows, c}, 4, 3.f), dy = pair({rows, c}, 5), dx = pair({rows, c}, 6);
  Tensor yb = Tensor::empty({rows, c}, DType::BF16), yf = Tensor::empty({rows, c}, DType::F32);
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

TEST(Bf16Kernels, RotaryRoundsOnce) {
  const int64_t b = 2, t = 9, h = 3, d = 16, half = d / 2;
  Tensor cos = Tensor::empty({t + 4, half}, DType::F32), sin = Tensor::empty({t + 4, half}, DType::F32);
  for (int64_t i = 0; i < cos.numel(); i++) {
    cos.data<float>()[i] = round_to_bf16(std::cos(0.1f * static_cast<float>(i)));
    sin.data<float>()[i] = round_to_bf16(std::sin(0.1f * static_cast<float>(i)));
  }
  Pair x = pair({b, t, h, d}, 7);
  for (bool inverse : {false, true}) {
    Tensor yb = Tensor::empty(x.bf.shape(), DType::BF16), yf = Tensor::empty(x.f.shape(), DType::F32);
    ops::rotary(yb, x.bf, cos, sin, 3, inverse);
    ops::rotary(yf, x.f, cos, sin, 3, inverse);
    expect_rounded_once(yb, yf, inverse ? "rotary inverse" : "rotary");
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

TEST(Bf16Kernels, CrossEntropyLossesAreF32AndTheGradientIsRoundedOnce) {
  const int64_t n = 23, vpad = 128, vocab = 100;
  Pair logits = pair({n, vpad}, 11, 8.f);
  Tensor targets = randint({n}, 12, 0, vocab);
  targets.data<int32_t>()[5] = -1;
  Tensor lb = Tensor::empty({n}, DType::F32), lf = Tensor::empty({n}, DType::F32);
  ops::softcap_cross_entropy(lb, logits.bf, targets, vocab, 15.f, 0.5f);
  ops::softcap_cross_entropy(lf, logits.f, targets, vocab, 15.f, 0.5f);
  EXPECT_EQ(vec(lb), vec(lf));
  expect_rounded_once(logits.bf, logits.f, "softcap_cross_entropy gradient");
}

// Attention rounds more than its output: P and dS enter GEMMs as bf16 (where the CUDA flash kernels
// round them for the tensor cores), so the bf16 result is compared with the f32 twin by size, not
// bit for bit. Each probability carries a relative rounding error of at most 2^-9 and each output
// row is a convex combination, so the forward is within 2^-9 (P) + 2^-9 (the output's own rounding)
// ~ 4e-3 of the largest output; the backward's dV and dK sum products of one rounded factor, dQ
// too, within ~2 x 2^-9 plus their rounding: 1e-2 of the largest covers both with room, while a
// kernel that mixes up heads or keys is off by O(1).
TEST(Bf16Kernels, AttentionFollowsItsF32TwinWithinTheRoundingOfPAndDs) {
  const int64_t b = 2, t = 150, hq = 4, hkv = 2, d = 32;
  Pair q = pair({b, t, hq, d}, 13), k = pair({b, t, hkv, d}, 14), v = pair({b, t, hkv, d}, 15),
       dout = pair({b, t, hq, d}, 16);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  Tensor ob = Tensor::empty(q.bf.shape(), DType::BF16), of = Tensor::empty(q.f.shape(), DType::F32);
  Tensor lb = Tensor::empty({b, hq, t}, DType::F32), lf = Tensor::empty({b, hq, t}, DType::F32);
  ops::attention_forward(ob, lb, q.bf, k.bf, v.bf, t, scale);
  ops::attention_forward(of, lf, q.f, k.f, v.f, t, scale);
  EXPECT_LT(max_rel_error(vec(ob), vec(of)), 4e-3);
  EXPECT_EQ(vec(lb), vec(lf));  // the scores and their log-sum-exp are f32 in both
  // Backward from the same (rounded) output, so only the kernel's own roundings differ.
  const Tensor o_same = to_f32(ob);
  auto grads = [&](DType t_) {
    return std::array<Tensor, 3>{Tensor::empty(q.f.shape(), t_), Tensor::empty(k.f.shape(), t_),
                                 Tensor::empty(v.f.shape(), t_)};
  };
  auto gb = grads(DType::BF16), gf = grads(DType::F32);
  ops::attention_backward(gb[0], gb[1], gb[2], dout.bf, q.bf, k.bf, v.bf, ob, lb, scale);
  ops::attention_backward(gf[0], gf[1], gf[2], dout.f, q.f, k.f, v.f, o_same, lb, scale);
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; i++) EXPECT_LT(max_rel_error(vec(gb[i]), vec(gf[i])), 1e-2) << names[i];
  // And decoding from a longer cache (kv_len < capacity), as sampling calls it.
  Pair kc = pair({b, t + 10, hkv, d}, 17), vc = pair({b, t + 10, hkv, d}, 18), q1 = pair({b, 3, hq, d}, 19);
  Tensor o1b = Tensor::empty(q1.bf.shape(), DType::BF16), o1f = Tensor::empty(q1.f.shape(), DType::F32);
  Tensor l1 = Tensor::empty({b, hq, 3}, DType::F32);
  ops::attention_forward(o1b, l1, q1.bf, kc.bf, vc.bf, 40, scale);
  ops::attention_forward(o1f, l1, q1.f, kc.f, vc.f, 40, scale);
  EXPECT_LT(max_rel_error(vec(o1b), vec(o1f)), 4e-3);
}

}  // namespace
}  // namespace nanoddp
