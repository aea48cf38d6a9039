// Recipe 2026's gate ops (value_gate_*, smear_*, scalar_mix_*) against slow double-precision twins
// written here from ops.h's definitions: the forward against the twin, every gradient against
// central finite differences of the twin (L = sum(w * y) with a random w, whose gradient is what
// the backward returns given dy = w), and the bf16 forward within bf16's rounding of f32's.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "ops/ops.h"

namespace nanoddp {
namespace {

using reference::Vec;
using testing::gather;
using testing::max_rel_error;
using testing::randn;
using testing::sample_indices;
using testing::vec;

constexpr double kTol = 1e-4;  // f32 analytic gradient against a double finite difference
// bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2%); an output here goes through at
// most four roundings (inputs, product, sum), so 1% of the largest magnitude bounds it.
constexpr double kBf16Tol = 1e-2;

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// v + 3 sigmoid(x[:, :k] w^T) * ve, per group of d: x [n, c], w [g, k], v, ve [n, g * d].
Vec value_gate_twin(const Vec& v, const Vec& x, const Vec& w, const Vec& ve, int64_t n, int64_t c, int64_t groups,
                    int64_t k) {
  const int64_t d = static_cast<int64_t>(v.size()) / (n * groups);
  Vec out = v;
  for (int64_t i = 0; i < n; i++)
    for (int64_t g = 0; g < groups; g++) {
      double z = 0;
      for (int64_t j = 0; j < k; j++) z += x[i * c + j] * w[g * k + j];
      for (int64_t e = 0; e < d; e++) out[(i * groups + g) * d + e] += 3 * sigmoid(z) * ve[(i * groups + g) * d + e];
    }
  return out;
}

// y[i] = x[i] + lambda sigmoid(x[i, :k] . w) x[i - 1] within rows of seq (prev before a row's start
// when given, else nothing).
Vec smear_twin(const Vec& x, const Vec* prev, const Vec& w, double lambda, int64_t c, int64_t seq) {
  const int64_t n = static_cast<int64_t>(x.size()) / c, k = static_cast<int64_t>(w.size());
  Vec y = x;
  for (int64_t i = 0; i < n; i++) {
    const double* before = i % seq > 0 ? &x[(i - 1) * c] : prev ? &(*prev)[(i / seq) * c] : nullptr;
    if (before == nullptr) continue;
    double z = 0;
    for (int64_t j = 0; j < k; j++) z += x[i * c + j] * w[j];
    for (int64_t e = 0; e < c; e++) y[i * c + e] += lambda * sigmoid(z) * before[e];
  }
  return y;
}

TEST(GateOps, ValueGateForwardAndGradients) {
  const int64_t n = 6, c = 16, groups = 2, k = 12, d = 4;
  Tensor x = randn({n, c}, 1), w = randn({groups, k}, 2), ve = randn({n, groups * d}, 3), v = randn({n, groups * d}, 4);
  Tensor lw = randn({n, groups * d}, 5), dx = randn({n, c}, 6);
  const Vec v0 = vec(v), dx0 = vec(dx);
  Tensor gate = Tensor::empty({n, groups}, DType::F32);
  ops::value_gate_forward(v, gate, x, w, ve);
  const Vec want = value_gate_twin(v0, vec(x), vec(w), vec(ve), n, c, groups, k);
  EXPECT_LT(max_rel_error(vec(v), want), 1e-6);  // f32 rounding of a few terms

  Tensor dw = Tensor::empty({groups, k}, DType::F32), dve = Tensor::empty(ve.shape(), DType::F32);
  ops::value_gate_backward(dx, dw, dve, lw, x, w, ve, gate);
  auto loss = [&](const Vec& xv, const Vec& wv, const Vec& vev) {
    return reference::dot(vec(lw), value_gate_twin(v0, xv, wv, vev, n, c, groups, k));
  };
  auto ix = sample_indices(x.numel(), x.numel(), 7), iw = sample_indices(w.numel(), w.numel(), 8),
       ie = sample_indices(ve.numel(), ve.numel(), 9);
  Vec got_dx = gather(dx, ix);
  for (size_t i = 0; i < ix.size(); i++) got_dx[i] -= dx0[ix[i]];  // dx accumulates
  EXPECT_LT(max_rel_error(got_dx, reference::finite_difference([&](const Vec& a) { return loss(a, vec(w), vec(ve)); },
                                                               vec(x), ix)),
            kTol);
  EXPECT_LT(max_rel_error(gather(dw, iw),
                          reference::finite_difference([&](const Vec& a) { return loss(vec(x), a, vec(ve)); }, vec(w),
                                                       iw)),
            kTol);
  EXPECT_LT(max_rel_error(gather(dve, ie),
                          reference::finite_difference([&](const Vec& a) { return loss(vec(x), vec(w), a); }, vec(ve),
                                                       ie)),
            kTol);
  for (int64_t j = k; j < c; j++) EXPECT_EQ(dx.data<float>()[j], dx0[j]) << "channel " << j << " is not read";
}

class SmearGrad : public ::testing::TestWithParam<float> {};

// The lambda is a parameter that starts at 0 (nanochat's init): its gradient must not need it
// nonzero.
TEST_P(SmearGrad, ForwardAndGradients) {
  const float lambda_value = GetParam();
  const int64_t batch = 2, seq = 5, c = 30, k = 24, n = batch * seq;
  Tensor x = randn({n, c}, 11), w = randn({1, k}, 12), lw = randn({n, c}, 13), prev = randn({batch, c}, 14);
  Tensor lambda = Tensor::empty({1}, DType::F32);
  lambda.data<float>()[0] = lambda_value;
  Tensor y = Tensor::empty(x.shape(), DType::F32), gate = Tensor::empty({n}, DType::F32);
  ops::smear_forward(y, gate, x, Tensor(), w, lambda, seq);
  EXPECT_LT(max_rel_error(vec(y), smear_twin(vec(x), nullptr, vec(w), lambda_value, c, seq)), 1e-6);
  const Vec pv = vec(prev);
  ops::smear_forward(y, gate, x, prev, w, lambda, seq);  // decoding after cached tokens
  EXPECT_LT(max_rel_error(vec(y), smear_twin(vec(x), &pv, vec(w), lambda_value, c, seq)), 1e-6);

  ops::smear_forward(y, gate, x, Tensor(), w, lambda, seq);
  Tensor dx = Tensor::empty(x.shape(), DType::F32), dw = Tensor::empty({1, k}, DType::F32);
  Tensor dlambda = Tensor::empty({1}, DType::F32), dgate = Tensor::empty({n}, DType::F32);
  ops::smear_backward(dx, dw, dlambda, dgate, lw, x, w, lambda, gate, seq);
  auto loss = [&](const Vec& xv, const Vec& wv, double lam) {
    return reference::dot(vec(lw), smear_twin(xv, nullptr, wv, lam, c, seq));
  };
  auto ix = sample_indices(x.numel(), x.numel(), 15), iw = sample_indices(k, k, 16);
  EXPECT_LT(max_rel_error(gather(dx, ix),
                          reference::finite_difference([&](const Vec& a) { return loss(a, vec(w), lambda_value); },
                                                       vec(x), ix)),
            kTol);
  if (lambda_value != 0.f) {  // at lambda 0 the gate's weight has no effect and a zero gradient
    EXPECT_LT(max_rel_error(gather(dw, iw),
                            reference::finite_difference([&](const Vec& a) { return loss(vec(x), a, lambda_value); },
                                                         vec(w), iw)),
              kTol);
  } else {
    for (int64_t j = 0; j < k; j++) EXPECT_EQ(dw.data<float>()[j], 0.f);
  }
  auto fd_lambda = reference::finite_difference([&](const Vec& a) { return loss(vec(x), vec(w), a[0]); },
                                                Vec{lambda_value}, {0});
  EXPECT_LT(max_rel_error(Vec{dlambda.data<float>()[0]}, fd_lambda), kTol);
}

INSTANTIATE_TEST_SUITE_P(Lambda, SmearGrad, ::testing::Values(0.f, 0.7f));

TEST(GateOps, ScalarMixForwardAndGradients) {
  const int64_t n = 40;
  const float s = -1.f;  // the backout's sign
  Tensor y = randn({n}, 21), x = randn({n}, 22), lw = randn({n}, 23), dx = randn({n}, 24);
  Tensor a = Tensor::empty({1}, DType::F32), b = Tensor::empty({1}, DType::F32);
  a.data<float>()[0] = 1.1f;
  b.data<float>()[0] = 0.3f;
  const Vec y0 = vec(y), dx0 = vec(dx);
  auto twin = [&](const Vec& yv, const Vec& xv, double av, double bv) {
    Vec out(yv.size());
    for (size_t i = 0; i < out.size(); i++) out[i] = av * yv[i] + s * bv * xv[i];
    return out;
  };
  ops::scalar_mix_forward(y, x, a, b, s);
  EXPECT_LT(max_rel_error(vec(y), twin(y0, vec(x), 1.1, 0.3)), 1e-6);
  Tensor dy = Tensor::empty({n}, DType::F32), da = Tensor::empty({1}, DType::F32), db = Tensor::empty({1}, DType::F32);
  copy(dy, lw);
  ops::scalar_mix_backward(dy, dx, da, db, testing::tensor(y0, {n}), x, a, b, s);
  auto loss = [&](const Vec& yv, const Vec& xv, double av, double bv) {
    return reference::dot(vec(lw), twin(yv, xv, av, bv));
  };
  auto all = sample_indices(n, n, 25);
  EXPECT_LT(max_rel_error(vec(dy), reference::finite_difference([&](const Vec& v) { return loss(v, vec(x), 1.1, 0.3); },
                                                                y0, all)),
            kTol);
  Vec got_dx = vec(dx);
  for (int64_t i = 0; i < n; i++) got_dx[static_cast<size_t>(i)] -= dx0[static_cast<size_t>(i)];  // dx accumulates
  EXPECT_LT(max_rel_error(got_dx, reference::finite_difference([&](const Vec& v) { return loss(y0, v, 1.1, 0.3); },
                                                               vec(x), all)),
            kTol);
  auto fa = reference::finite_difference([&](const Vec& v) { return loss(y0, vec(x), v[0], 0.3); }, Vec{1.1}, {0});
  auto fb = reference::finite_difference([&](const Vec& v) { return loss(y0, vec(x), 1.1, v[0]); }, Vec{0.3}, {0});
  EXPECT_LT(max_rel_error(Vec{da.data<float>()[0]}, fa), kTol);
  EXPECT_LT(max_rel_error(Vec{db.data<float>()[0]}, fb), kTol);
}

// The same forwards on bf16 storage: within bf16's rounding of the f32 results.
TEST(GateOps, Bf16ForwardsWithinRoundingOfF32) {
  const int64_t n = 8, c = 32, groups = 2, k = 12, d = 8, seq = 4;
  auto bf = [](const Tensor& t) {
    Tensor b = Tensor::empty(t.shape(), DType::BF16);
    ops::cast(b, t);
    return b;
  };
  auto f32 = [](const Tensor& t) {
    Tensor f = Tensor::empty(t.shape(), DType::F32);
    ops::cast(f, t);
    return f;
  };
  Tensor x = randn({n, c}, 31), w = randn({groups, k}, 32), ve = randn({n, groups * d}, 33), v = randn(ve.shape(), 34);
  Tensor gate = Tensor::empty({n, groups}, DType::F32), vb = bf(v);
  ops::value_gate_forward(vb, gate, bf(x), bf(w), bf(ve));
  ops::value_gate_forward(v, gate, x, w, ve);
  EXPECT_LT(max_rel_error(vec(f32(vb)), vec(v)), kBf16Tol);

  Tensor sw = randn({1, 24}, 35), lambda = Tensor::empty({1}, DType::F32), sg = Tensor::empty({n}, DType::F32);
  lambda.data<float>()[0] = 0.5f;
  Tensor y = Tensor::empty(x.shape(), DType::F32), yb = Tensor::empty(x.shape(), DType::BF16);
  ops::smear_forward(y, sg, x, Tensor(), sw, lambda, seq);
  ops::smear_forward(yb, sg, bf(x), Tensor(), bf(sw), lambda, seq);
  EXPECT_LT(max_rel_error(vec(f32(yb)), vec(y)), kBf16Tol);
}

}  // namespace
}  // namespace nanoddp
