// Every backward kernel against central finite differences of the double-precision reference
// forward. For an op y = f(x), the scalar checked is L = sum(w * y) with a random w, whose gradient
// is what the backward kernel returns when given dy = w.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "ops/ops.h"

namespace nanoddp {
namespace {

using reference::Vec;
using testing::gather;
using testing::max_rel_error;
using testing::randint;
using testing::randn;
using testing::sample_indices;
using testing::vec;

constexpr double kTol = 1e-4;  // f32 analytic gradient against a double finite difference

TEST(Grad, RmsNorm) {
  const int64_t rows = 5, c = 24;
  const float eps = 1.1920929e-07f;
  Tensor x = randn({rows, c}, 1), w = randn({rows, c}, 2);
  Tensor y = Tensor::empty(x.shape(), DType::F32), rstd = Tensor::empty({rows}, DType::F32);
  Tensor dx = randn(x.shape(), 3);
  auto dx0 = vec(dx);
  ops::rmsnorm_forward(y, rstd, x, eps);
  ops::rmsnorm_backward(dx, w, y, rstd, /*accumulate=*/true);
  auto idx = sample_indices(x.numel(), 200, 4);
  auto fd = reference::finite_difference(
      [&](const Vec& xv) { return reference::dot(vec(w), reference::rmsnorm(xv, c, eps)); }, vec(x), idx);
  Vec got = gather(dx, idx);
  for (size_t i = 0; i < idx.size(); i++) got[i] -= dx0[idx[i]];  // accumulate added to what was there
  EXPECT_LT(max_rel_error(got, fd), kTol);
}

TEST(Grad, Rotary) {
  const int64_t b = 1, t = 6, h = 2, d = 8;
  Tensor cos = randn({t, d / 2}, 5), sin = randn({t, d / 2}, 6);
  Tensor x = randn({b, t, h, d}, 7), w = randn(x.shape(), 8), dx = Tensor::empty(x.shape(), DType::F32);
  ops::rotary(dx, w, cos, sin, 0, /*inverse=*/true);
  auto idx = sample_indices(x.numel(), 200, 9);
  auto fd = reference::finite_difference(
      [&](const Vec& xv) {
        return reference::dot(vec(w), reference::rotary(xv, b, t, h, d, vec(cos), vec(sin), 0, false));
      },
      vec(x), idx);
  EXPECT_LT(max_rel_error(gather(dx, idx), fd), kTol);
}

struct AttnGradCase {
  int64_t b, t, hq, hkv, d;
  int64_t window = 0;  // 0: full causal; else the query at i sees keys i - window ..= i
};

class AttentionGrad : public ::testing::TestWithParam<AttnGradCase> {};

TEST_P(AttentionGrad, QueryKeyValue) {
  auto [b, t, hq, hkv, d, window] = GetParam();
  const float scale = 1.f / std::sqrt(float(d));
  Tensor q = randn({b, t, hq, d}, 10), k = randn({b, t, hkv, d}, 11), v = randn({b, t, hkv, d}, 12);
  Tensor w = randn(q.shape(), 13);
  Tensor out = Tensor::empty(q.shape(), DType::F32), lse = Tensor::empty({b, hq, t}, DType::F32);
  Tensor dq = Tensor::empty(q.shape(), DType::F32), dk = Tensor::empty(k.shape(), DType::F32),
         dv = Tensor::empty(v.shape(), DType::F32);
  ops::attention_forward(out, lse, q, k, v, t, scale, window);
  ops::attention_backward(dq, dk, dv, w, q, k, v, out, lse, scale, window);
  Vec qv = vec(q), kv = vec(k), vv = vec(v), wv = vec(w);
  auto loss = [&](const Vec& qq, const Vec& kk, const Vec& vvv) {
    return reference::dot(wv, reference::attention(qq, kk, vvv, b, t, t, hq, hkv, d, t, scale, nullptr, window));
  };
  auto iq = sample_indices(q.numel(), 60, 14), ik = sample_indices(k.numel(), 60, 15),
       iv = sample_indices(v.numel(), 60, 16);
  auto fq = reference::finite_difference([&](const Vec& x) { return loss(x, kv, vv); }, qv, iq);
  auto fk = reference::finite_difference([&](const Vec& x) { return loss(qv, x, vv); }, kv, ik);
  auto fv = reference::finite_difference([&](const Vec& x) { return loss(qv, kv, x); }, vv, iv);
  EXPECT_LT(max_rel_error(gather(dq, iq), fq), kTol);
  EXPECT_LT(max_rel_error(gather(dk, ik), fk), kTol);
  EXPECT_LT(max_rel_error(gather(dv, iv), fv), kTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGrad,
                         ::testing::Values(AttnGradCase{2, 7, 2, 2, 8},     // multi-head
                                           AttnGradCase{1, 9, 4, 2, 8},     // grouped-query
                                           AttnGradCase{1, 140, 1, 1, 4},   // crosses a query tile
                                           // sliding windows: itself and one key; a band; one that
                                           // starts the second tile's keys at 78 (not a tile edge);
                                           // the widest that masks a key (T - 2)
                                           AttnGradCase{1, 9, 2, 1, 8, 1}, AttnGradCase{2, 11, 2, 2, 8, 4},
                                           AttnGradCase{1, 140, 2, 1, 4, 50}, AttnGradCase{1, 140, 1, 1, 4, 138}));

TEST(Grad, Relu2) {
  Tensor x = randn({300}, 20), w = randn({300}, 21), dx = Tensor::empty({300}, DType::F32);
  for (int64_t i = 0; i < 300; i++)  // keep away from the kink at 0
    if (std::abs(x.data<float>()[i]) < 1e-3f) x.data<float>()[i] = 0.5f;
  ops::relu2_backward(dx, w, x);
  auto idx = sample_indices(300, 300, 22);
  auto fd = reference::finite_difference([&](const Vec& xv) { return reference::dot(vec(w), reference::relu2(xv)); },
                                         vec(x), idx);
  EXPECT_LT(max_rel_error(gather(dx, idx), fd), kTol);
}

TEST(Grad, SoftcapCrossEntropy) {
  const int64_t n = 6, vpad = 64, vocab = 45;
  const float grad_scale = 0.37f;
  Tensor logits = randn({n, vpad}, 23, 10.f), targets = randint({n}, 24, 0, vocab);
  targets.data<int32_t>()[2] = -1;
  Vec x0 = vec(logits);
  Tensor losses = Tensor::empty({n}, DType::F32);
  ops::softcap_cross_entropy(losses, logits, targets, vocab, 15.f, grad_scale);  // logits now hold the gradient
  auto tv = testing::ints(targets);
  auto idx = sample_indices(logits.numel(), logits.numel(), 25);
  auto fd = reference::finite_difference(
      [&](const Vec& xv) {
        Vec l = reference::softcap_cross_entropy(xv, tv, vpad, vocab, 15.0);
        double s = 0;
        for (double e : l) s += e;
        return grad_scale * s;
      },
      x0, idx);
  EXPECT_LT(max_rel_error(gather(logits, idx), fd), kTol);
  for (int64_t i = 0; i < n; i++)  // padding columns: exactly zero
    for (int64_t j = vocab; j < vpad; j++) EXPECT_EQ(logits.data<float>()[i * vpad + j], 0.f);
}

TEST(Grad, EmbeddingTable) {
  const int64_t v = 7, c = 5, n = 12;
  Tensor table = randn({v, c}, 26), ids = randint({n}, 27, 0, v), w = randn({n, c}, 28);
  Tensor dtable = Tensor::zeros({v, c}, DType::F32);
  ops::embedding_backward(dtable, w, ids);
  auto idv = testing::ints(ids);
  auto idx = sample_indices(table.numel(), table.numel(), 29);
  auto fd = reference::finite_difference(
      [&](const Vec& tv) { return reference::dot(vec(w), reference::embedding(tv, idv, c)); }, vec(table), idx);
  EXPECT_LT(max_rel_error(gather(dtable, idx), fd), kTol);
}

TEST(Grad, LinearLayerAsTheModelUsesIt) {
  // y = x W^T; dx = dy W; dW += dy^T x (accumulated over micro-steps).
  const int64_t n = 9, in = 6, out = 4;
  Tensor x = randn({n, in}, 30), wt = randn({out, in}, 31), w = randn({n, out}, 32);
  Tensor dx = Tensor::empty({n, in}, DType::F32), dw = Tensor::zeros({out, in}, DType::F32);
  ops::matmul(dx, w, false, wt, false);
  ops::matmul(dw, w, true, x, false, 1.f, 1.f);
  auto loss_x = [&](const Vec& xv) { return reference::dot(vec(w), reference::matmul(xv, false, vec(wt), true, n, out, in)); };
  auto loss_w = [&](const Vec& wv) { return reference::dot(vec(w), reference::matmul(vec(x), false, wv, true, n, out, in)); };
  auto ix = sample_indices(x.numel(), 100, 33), iw = sample_indices(wt.numel(), 100, 34);
  EXPECT_LT(max_rel_error(gather(dx, ix), reference::finite_difference(loss_x, vec(x), ix)), kTol);
  EXPECT_LT(max_rel_error(gather(dw, iw), reference::finite_difference(loss_w, vec(wt), iw)), kTol);
}

}  // namespace
}  // namespace nanoddp
