// Optimizer kernels: AdamW over several steps against the update written out in double, Muon's
// momentum against its definition, Newton-Schulz against exact arithmetic and by its purpose
// (the singular values of the result are pushed towards 1); the 2026 Muon's Polar Express and NorMuon
// update against slow twins in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernel_test_util.h"
#include "ops/backend.h"
#include "ops/ops.h"

namespace nanoddp {
namespace {

using testing::max_rel_error;
using testing::randn;
using testing::vec;

TEST(AdamW, ThreeStepsMatchTheFormula) {
  const int64_t n = 1000;
  Tensor p = randn({n}, 1), m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
  auto pd = vec(p);
  std::vector<double> md(n, 0), vd(n, 0);
  ops::AdamWStep s{.lr = 0.01f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-10f, .weight_decay = 0.1f};
  for (int step = 1; step <= 3; step++) {
    Tensor g = randn({n}, 10 + step);
    s.step = step;
    ops::adamw_update(p, g, m, v, s);
    for (int64_t i = 0; i < n; i++) {
      double gi = g.data<float>()[i];
      md[i] = 0.8 * md[i] + 0.2 * gi;
      vd[i] = 0.95 * vd[i] + 0.05 * gi * gi;
      double mhat = md[i] / (1 - std::pow(0.8, step)), vhat = vd[i] / (1 - std::pow(0.95, step));
      pd[i] = pd[i] * (1 - 0.01 * 0.1) - 0.01 * mhat / (std::sqrt(vhat) + 1e-10);
    }
  }
  EXPECT_LT(max_rel_error(vec(p), pd), 1e-6);
  EXPECT_LT(max_rel_error(vec(m), md), 1e-6);
  EXPECT_LT(max_rel_error(vec(v), vd), 1e-6);
}

// Gradient clipping's norm: against a double sum, and the same bits at any thread count (fixed chunks).
// Tolerance: the kernel sums doubles of f32 squares in chunks; 1e-6 relative covers the final
// rounding to f32 (6e-8) with room.
TEST(SumSquares, MatchesADoubleSumAndIsTheSameAtAnyThreadCount) {
  const int before = ops::cpu_threads();
  for (int64_t n : {1, 7, 100000, 1 << 20}) {
    Tensor x = randn({n}, 40 + static_cast<uint64_t>(n)), out = Tensor::empty({1}, DType::F32);
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += double(x.data<float>()[i]) * x.data<float>()[i];
    ops::set_cpu_threads(1);
    ops::sum_squares(out, x);
    const float one = out.data<float>()[0];
    ops::set_cpu_threads(2);
    ops::sum_squares(out, x);
    EXPECT_EQ(out.data<float>()[0], one) << n;
    EXPECT_NEAR(one, want, 1e-6 * want) << n;
  }
  ops::set_cpu_threads(before);
}

TEST(Muon, NesterovMomentumMatchesDefinition) {
  const int64_t n = 257;
  const float mom = 0.9f;
  Tensor g = randn({n}, 2), buf = randn({n}, 3);
  auto gd = vec(g), bd = vec(buf);
  ops::muon_momentum(g, buf, mom);
  for (int64_t i = 0; i < n; i++) {
    bd[i] = bd[i] + (1 - mom) * (gd[i] - bd[i]);
    gd[i] = gd[i] + mom * (bd[i] - gd[i]);
  }
  EXPECT_LT(max_rel_error(vec(buf), bd), 1e-6);
  EXPECT_LT(max_rel_error(vec(g), gd), 1e-6);
}

class NewtonSchulz : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(NewtonSchulz, CloseToExactArithmeticAndOrthogonalising) {
  auto [rows, cols] = GetParam();
  Tensor x = randn({rows, cols}, 4);
  auto exact = reference::newton_schulz(vec(x), rows, cols, 5);
  ops::newton_schulz(x, 5, true);
  // bf16 keeps 8 bits of mantissa and five iterations amplify its rounding: PyTorch's own bf16
  // Newton-Schulz lands 5-12% (max error over max entry) from exact arithmetic on these shapes
  // (measured with python3-torch 1.13). A wrong coefficient, order or transpose is off by O(1).
  // The bit-level check of the bf16 steps is the PyTorch golden test (tests/model).
  EXPECT_LT(max_rel_error(vec(x), exact), 0.15);
  // Singular values of the result lie near 1: the eigenvalues of X X^T (small side) within
  // [0.3, 1.6], bounds the quintic's known range (about 0.7-1.2 in singular values) comfortably
  // contains; a Gaussian matrix's own spread is far wider.
  const int64_t m = std::min(rows, cols), n = std::max(rows, cols);
  const bool tr = rows > cols;
  auto xv = vec(x);
  auto at = [&](int64_t i, int64_t j) { return tr ? xv[j * cols + i] : xv[i * cols + j]; };
  std::vector<double> gram(m * m, 0);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < m; j++)
      for (int64_t k = 0; k < n; k++) gram[i * m + j] += at(i, k) * at(j, k);
  double trace = 0, frob = 0;
  for (int64_t i = 0; i < m; i++) trace += gram[i * m + i];
  for (double e : gram) frob += e * e;
  // mean eigenvalue and root-mean-square eigenvalue both near 1
  EXPECT_GT(trace / m, 0.5);
  EXPECT_LT(trace / m, 1.3);
  EXPECT_LT(std::sqrt(frob / m), 1.4);
}

// One bf16 step of the kernel (x) against its emulation in double with bf16 rounding where the
// kernel rounds (want): within 2^-7 of the largest entry everywhere and equal bits in at least 99%
// of them (Newton-Schulz's OneBf16StepRoundsEachOpOnce says why).
void expect_bf16_step_as_emulated(const Tensor& x, const std::vector<double>& want) {
  double largest = 0, worst = 0;
  int64_t equal = 0;
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; i++) {
    largest = std::max(largest, std::abs(want[i]));
    worst = std::max(worst, std::abs(x.data<float>()[i] - want[i]));
    equal += x.data<float>()[i] == want[i];
  }
  EXPECT_LT(worst, largest / 128);
  EXPECT_GE(equal, n * 99 / 100) << equal << " of " << n << " equal";
}

// One bf16 Newton-Schulz step against its definition written out: every tensor op's result
// rounded to bf16 once (GEMMs summed in double here, in f32 in the kernel), scalars in f32.
// Tolerance: the kernel's f32 accumulation (in the bf16 matmul's own order) and the reference's
// double sum round to different bf16 neighbours when a value sits within ~2^-24 relative of a
// rounding boundary; a flip in A or B moves the step's output by about one bf16 ulp of its
// largest entries. So: within 2^-7 (two bf16 ulps) of the largest output everywhere, and equal
// bits in at least 99% of the elements (measured on Zen 5: all at the three small shapes, 262,140
// of 262,144 at 256x1024, worst 1.0e-3 of the largest). One rounding point left out of the
// reference (b A unrounded, tried) leaves only 92-93% equal at the small shapes; a wrong
// coefficient or transpose breaks both checks by far.
TEST_P(NewtonSchulz, OneBf16StepRoundsEachOpOnce) {
  auto [rows, cols] = GetParam();
  Tensor x = randn({rows, cols}, 5);
  const bool tr = rows > cols;
  const int64_t m = std::min(rows, cols), n = std::max(rows, cols);
  auto rb = [](double v) { return static_cast<double>(round_to_bf16(static_cast<float>(v))); };
  std::vector<double> X(m * n);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) X[tr ? j * rows + i : i * cols + j] = rb(x.data<float>()[i * cols + j]);
  double ss = 0;
  for (double v : X) ss += v * v;
  const float denom = round_to_bf16(round_to_bf16(static_cast<float>(std::sqrt(ss))) + 1e-7f);
  for (double& v : X) v = rb(static_cast<float>(v) / denom);
  auto gemm = [&](const std::vector<double>& a, const std::vector<double>& b, int64_t p, int64_t q, int64_t k,
                  bool trans_b) {
    std::vector<double> c(p * q);
    for (int64_t i = 0; i < p; i++)
      for (int64_t j = 0; j < q; j++) {
        double acc = 0;
        for (int64_t l = 0; l < k; l++) acc += a[i * k + l] * (trans_b ? b[j * k + l] : b[l * q + j]);
        c[i * q + j] = rb(acc);
      }
    return c;
  };
  const float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  auto A = gemm(X, X, m, m, n, true), cA = A;
  for (double& v : cA) v = rb(c * static_cast<float>(v));
  auto B = gemm(cA, A, m, m, m, false);
  for (int64_t i = 0; i < m * m; i++) B[i] = rb(rb(b * static_cast<float>(A[i])) + static_cast<float>(B[i]));
  auto BX = gemm(B, X, m, n, m, false);
  std::vector<double> want(rows * cols);
  for (int64_t i = 0; i < m * n; i++) X[i] = rb(rb(a * static_cast<float>(X[i])) + static_cast<float>(BX[i]));
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) want[i * cols + j] = X[tr ? j * rows + i : i * cols + j];

  ops::newton_schulz(x, 1, true);
  expect_bf16_step_as_emulated(x, want);
}

// Matrices passed together (as Muon passes each shape's matrices) run side by side, one per
// thread, each single-threaded: so each comes out exactly as it does alone on one thread, in both
// modes, whichever thread ran it (run to run the same bits), each with its own norm, and nothing of
// one leaks into another.
TEST_P(NewtonSchulz, ManyMatricesAtOnceEqualEachAloneOnOneThread) {
  auto [rows, cols] = GetParam();
  const int threads = ops::cpu_threads();
  for (bool bf16 : {false, true}) {
    std::vector<Tensor> together, again, alone;
    for (uint64_t i = 0; i < 5; i++) {
      Tensor x = randn({rows, cols}, 20 + i);
      if (i == 3) ops::scale(x, 40.f);  // a different norm
      together.push_back(x);
      again.push_back(x.copy_to(Device::cpu()));
      alone.push_back(x.copy_to(Device::cpu()));
    }
    ops::set_cpu_threads(1);
    for (Tensor& x : alone) ops::newton_schulz(x, 3, bf16);
    ops::set_cpu_threads(std::max(2, threads));  // side by side even where one core is all there is
    ops::newton_schulz(together, 3, bf16);
    ops::newton_schulz(again, 3, bf16);
    ops::set_cpu_threads(threads);
    for (size_t i = 0; i < alone.size(); i++) {
      EXPECT_EQ(vec(together[i]), vec(alone[i])) << "matrix " << i << ", bf16 " << bf16;
      EXPECT_EQ(vec(together[i]), vec(again[i])) << "run to run: matrix " << i << ", bf16 " << bf16;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, NewtonSchulz,
                         ::testing::Values(std::pair<int64_t, int64_t>{32, 32}, std::pair<int64_t, int64_t>{16, 48},
                                           std::pair<int64_t, int64_t>{64, 24},
                                           std::pair<int64_t, int64_t>{256, 1024}));

// ---- nanochat's 2026 Muon: Polar Express and NorMuon ----

// The slow twin of polar_express: nanochat's iteration in double, plain loops, with its own copy
// of nanochat's coefficient list (so that a wrong digit in ops.h shows). x [rows, cols].
std::vector<double> polar_express_twin(std::vector<double> x, int64_t rows, int64_t cols, int steps) {
  static const double kCoeffs[5][3] = {{8.156554524902461, -22.48329292557795, 15.878769915207462},
                                       {4.042929935166739, -2.808917465908714, 0.5000178451051316},
                                       {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
                                       {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
                                       {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}};
  double ss = 0;
  for (double v : x) ss += v * v;
  for (double& v : x) v /= std::sqrt(ss) * 1.01 + 1e-6;
  const bool tall = rows > cols;
  const int64_t m = std::min(rows, cols), n = std::max(rows, cols);
  // element (i, k) of the [m, n] view: x itself when wide, x^T when tall
  auto at = [&](const std::vector<double>& v, int64_t i, int64_t k) {
    return tall ? v[k * cols + i] : v[i * cols + k];
  };
  for (int s = 0; s < steps; s++) {
    const double a = kCoeffs[s][0], b = kCoeffs[s][1], c = kCoeffs[s][2];
    std::vector<double> A(m * m, 0), B(m * m, 0), next(x.size());
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < m; j++)
        for (int64_t k = 0; k < n; k++) A[i * m + j] += at(x, i, k) * at(x, j, k);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < m; j++) {
        double aa = 0;
        for (int64_t k = 0; k < m; k++) aa += A[i * m + k] * A[k * m + j];
        B[i * m + j] = b * A[i * m + j] + c * aa;
      }
    // X = a X + B X on the [m, n] view (the tall branch's a X + X B is its transpose: B is symmetric)
    for (int64_t i = 0; i < m; i++)
      for (int64_t k = 0; k < n; k++) {
        double bx = 0;
        for (int64_t j = 0; j < m; j++) bx += B[i * m + j] * at(x, j, k);
        (tall ? next[k * cols + i] : next[i * cols + k]) = a * at(x, i, k) + bx;
      }
    x = next;
  }
  return x;
}

// The largest |eigenvalue| of (X X^T - I) on the small side of x [rows, cols]: how far the
// singular values' squares are from 1, by power iteration in double on the symmetric matrix.
double gram_distance_from_identity(const std::vector<double>& x, int64_t rows, int64_t cols) {
  const bool tall = rows > cols;
  const int64_t m = std::min(rows, cols), n = std::max(rows, cols);
  auto at = [&](int64_t i, int64_t k) { return tall ? x[k * cols + i] : x[i * cols + k]; };
  std::vector<double> M(m * m, 0), q(m, 1.0), next(m);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < m; j++) {
      for (int64_t k = 0; k < n; k++) M[i * m + j] += at(i, k) * at(j, k);
      if (i == j) M[i * m + j] -= 1;
    }
  double lambda = 0;
  for (int it = 0; it < 2000; it++) {  // power iteration on M^2 (both signs of eigenvalue)
    for (int64_t i = 0; i < m; i++) {
      next[i] = 0;
      for (int64_t j = 0; j < m; j++) next[i] += M[i * m + j] * q[j];
    }
    double norm = 0;
    for (double v : next) norm += v * v;
    norm = std::sqrt(norm);
    if (norm == 0) return 0;
    lambda = norm;  // ||M q|| with ||q|| = 1
    for (int64_t i = 0; i < m; i++) q[i] = next[i] / norm;
  }
  return lambda;
}

class PolarExpress : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

// Against the double twin in f32 and in nanochat's bf16, after 1 and 5 steps.
// f32: each GEMM rounds at ~1e-7 relative and five steps with coefficients up to 22 amplify that,
// but the iteration contracts towards the polar factor: measured 1e-7 after one step, 3e-6 to 5e-6
// of the largest entry after five (Zen 5); 1e-4 leaves 20x room, while a wrong digit in a
// coefficient or a wrong branch is off by far more. bf16: the first step's coefficients (8.2,
// -22.5, 15.9) cancel heavily, so bf16's 8 mantissa bits leave a few percent: measured 6-8% of the
// largest entry, 5-7% in the Frobenius norm; PyTorch's own bf16 Polar Express (nanochat's loop
// in python3-torch on the CPU, 5 seeds of these shapes) lands 11-22% and 10-15% from exact
// arithmetic, so 0.25 and 0.2 accept what nanochat accepts. A wrong branch or order is O(1).
TEST_P(PolarExpress, MatchesTheDoubleTwinInF32AndBf16) {
  auto [rows, cols] = GetParam();
  Tensor x = randn({rows, cols}, 7);
  for (int steps : {1, 5}) {
    const auto want = polar_express_twin(vec(x), rows, cols, steps);
    Tensor f = x.copy_to(Device::cpu()), b = x.copy_to(Device::cpu());
    ops::polar_express(f, steps, false);
    ops::polar_express(b, steps, true);
    EXPECT_LT(max_rel_error(vec(f), want), 1e-4) << "f32, steps " << steps;
    EXPECT_LT(max_rel_error(vec(b), want), 0.25) << "bf16, steps " << steps;
    EXPECT_LT(testing::rel_l2(vec(b), want), 0.2) << "bf16, steps " << steps;
  }
}

// One bf16 step against nanochat's bf16 tensor ops written out: each op's result rounded to bf16
// once (GEMMs summed in double here, in f32 in the kernel), scalars f32, c (A A) squared before
// scaling, the tall branch X B. Tolerance as Newton-Schulz's one-step test above (a GEMM's sum near
// a rounding boundary may round to the other bf16 neighbour): within two bf16 ulps of the largest
// entry, and at least 99% of the elements equal to the bit (measured: all of them at these shapes,
// Zen 5). Newton-Schulz's order (c A) A in place of nanochat's c (A A), tried in the twin, leaves
// 97.4-98.5% equal at the three small shapes; a wrong coefficient or branch breaks both checks.
TEST_P(PolarExpress, OneBf16StepRoundsEachOpOnce) {
  auto [rows, cols] = GetParam();
  Tensor x = randn({rows, cols}, 9);
  const bool tall = rows > cols;
  const int64_t m = std::min(rows, cols);
  auto rb = [](double v) { return static_cast<double>(round_to_bf16(static_cast<float>(v))); };
  std::vector<double> X(rows * cols);
  double ss = 0;
  for (int64_t i = 0; i < rows * cols; i++) {
    X[i] = rb(x.data<float>()[i]);
    ss += X[i] * X[i];
  }
  const float norm = round_to_bf16(static_cast<float>(std::sqrt(ss)));
  const float denom = round_to_bf16(round_to_bf16(norm * 1.01f) + 1e-6f);
  for (double& v : X) v = rb(static_cast<float>(v) / denom);
  // c[p, q] = rb(sum_l a(p, l) b(l, q)) over accessors
  auto gemm = [&](auto a, auto b, int64_t P, int64_t Q, int64_t L) {
    std::vector<double> c(P * Q);
    for (int64_t i = 0; i < P; i++)
      for (int64_t j = 0; j < Q; j++) {
        double acc = 0;
        for (int64_t l = 0; l < L; l++) acc += a(i, l) * b(l, j);
        c[i * Q + j] = rb(acc);
      }
    return c;
  };
  auto x_ = [&](int64_t i, int64_t j) { return X[i * cols + j]; };
  auto xt = [&](int64_t i, int64_t j) { return X[j * cols + i]; };
  const std::vector<double> A = tall ? gemm(xt, x_, m, m, rows) : gemm(x_, xt, m, m, cols);
  auto a_ = [&](int64_t i, int64_t j) { return A[i * m + j]; };
  const std::vector<double> AA = gemm(a_, a_, m, m, m);
  const float a = 8.156554524902461f, b = -22.48329292557795f, c = 15.878769915207462f;
  std::vector<double> B(m * m);
  for (int64_t i = 0; i < m * m; i++) B[i] = rb(rb(b * static_cast<float>(A[i])) + rb(c * static_cast<float>(AA[i])));
  auto b_ = [&](int64_t i, int64_t j) { return B[i * m + j]; };
  const std::vector<double> XB = tall ? gemm(x_, b_, rows, m, m) : gemm(b_, x_, m, cols, m);
  std::vector<double> want(rows * cols);
  for (int64_t i = 0; i < rows * cols; i++) want[i] = rb(rb(a * static_cast<float>(X[i])) + XB[i]);

  ops::polar_express(x, 1, true);
  expect_bf16_step_as_emulated(x, want);
}

// The purpose: singular values pushed to 1. Polar Express's five steps map every singular value
// in [0.001, 1/1.01] (the interval it is fitted on, after the 1.01 safety normalisation) into
// [0.8589, 1.1411] (the scalar composition p5(...p1(s)), evaluated on a fine grid: see the commit),
// so the eigenvalues of X X^T lie within 0.3022 of 1. A Gaussian matrix of aspect 4 has normalised
// singular values within a factor 3 of each other, near 1/sqrt(min side): inside the interval.
// Allowed: 0.31 (f32 rounding and the power iteration's own error, both below 1e-3). The quintic
// Newton-Schulz, whose singular values spread over about (0.7, 1.2), exceeds it on the same input.
TEST_P(PolarExpress, PushesSingularValuesOfAWellConditionedMatrixToOne) {
  auto [rows, cols] = GetParam();
  if (std::max(rows, cols) < 4 * std::min(rows, cols)) GTEST_SKIP() << "a square Gaussian is ill-conditioned";
  Tensor x = randn({rows, cols}, 8);
  EXPECT_GT(gram_distance_from_identity(vec(x), rows, cols), 1.0);  // the input is far from orthogonal
  Tensor quintic = x.copy_to(Device::cpu());
  ops::polar_express(x, 5, false);
  EXPECT_LT(gram_distance_from_identity(vec(x), rows, cols), 0.31);
  ops::newton_schulz(quintic, 5, false);  // the bound tells the two apart
  EXPECT_GT(gram_distance_from_identity(vec(quintic), rows, cols), 0.31);
}

// Several matrices at once come out as each does alone on one thread (the batching of
// newton_schulz), with their own norms.
TEST_P(PolarExpress, ManyMatricesAtOnceEqualEachAloneOnOneThread) {
  auto [rows, cols] = GetParam();
  const int threads = ops::cpu_threads();
  for (bool bf16 : {false, true}) {
    std::vector<Tensor> together, alone;
    for (uint64_t i = 0; i < 4; i++) {
      Tensor x = randn({rows, cols}, 30 + i);
      if (i == 2) ops::scale(x, 30.f);
      together.push_back(x);
      alone.push_back(x.copy_to(Device::cpu()));
    }
    ops::set_cpu_threads(1);
    for (Tensor& x : alone) ops::polar_express(x, 5, bf16);
    ops::set_cpu_threads(std::max(2, threads));
    ops::polar_express(together, 5, bf16);
    ops::set_cpu_threads(threads);
    for (size_t i = 0; i < alone.size(); i++) EXPECT_EQ(vec(together[i]), vec(alone[i])) << i << " bf16 " << bf16;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PolarExpress,
                         ::testing::Values(std::pair<int64_t, int64_t>{32, 32}, std::pair<int64_t, int64_t>{16, 64},
                                           std::pair<int64_t, int64_t>{96, 24}, std::pair<int64_t, int64_t>{64, 256}));

// The slow twin of normuon_update, in double: nanochat's variance reduction and cautious update
// written out. p, g [rows, cols]; v [rows] when rows >= cols, else [cols].
void normuon_twin(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& v, int64_t rows,
                  int64_t cols, double lr, double wd, double beta2) {
  const bool per_row = rows >= cols;
  const int64_t k = per_row ? rows : cols, red = per_row ? cols : rows;
  auto owner = [&](int64_t r, int64_t c) { return per_row ? r : c; };
  std::vector<double> u(k, 0), step(k);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) u[owner(r, c)] += g[r * cols + c] * g[r * cols + c] / double(red);
  double norm_sq = 0, new_sq = 0;
  for (int64_t i = 0; i < k; i++) {
    norm_sq += u[i] * double(red);
    v[i] = beta2 * v[i] + (1 - beta2) * u[i];
    step[i] = 1 / std::sqrt(std::max(v[i], 1e-10));
    new_sq += u[i] * double(red) * step[i] * step[i];
  }
  const double ratio = std::sqrt(norm_sq) / std::max(std::sqrt(new_sq), 1e-10);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      double& pi = p[r * cols + c];
      const double gi = g[r * cols + c] * step[owner(r, c)] * ratio;
      pi -= lr * gi + (gi * pi >= 0 ? lr * wd * pi : 0.0);
    }
}

class NorMuon : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

// Three steps (so the second moment's running average matters) against the twin, for a tall, a
// square and a wide matrix (per-row and per-column moments). Rows' scales differ by 10x so that
// the variance reduction has something to equalise. Tolerance: a handful of f32 roundings per
// element (~1e-7 each) on values of order 1; 1e-5 of the largest leaves room. The one sign test
// g' p >= 0 could flip between f32 and double only where g' p is within rounding of 0, where the
// decay term it switches is itself lr wd p ~ 0 in the product's scale; with these random inputs no
// element sits there (the check would show a jump of lr wd |p|, 1e-4 here).
TEST_P(NorMuon, ThreeStepsMatchTheDoubleTwin) {
  auto [rows, cols] = GetParam();
  const bool per_row = rows >= cols;
  Tensor p = randn({rows, cols}, 50), v = Tensor::zeros({per_row ? rows : cols}, DType::F32);
  auto pd = vec(p), vd = vec(v);
  const float lr = 0.02f, wd = 0.2f, beta2 = 0.9f;
  for (int step = 0; step < 3; step++) {
    Tensor g = randn({rows, cols}, 60 + static_cast<uint64_t>(step));
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) g.data<float>()[r * cols + c] *= 1.f + 9.f * float(r % 2 == c % 3);
    ops::normuon_update(p, g, v, lr, wd, beta2);
    normuon_twin(pd, vec(g), vd, rows, cols, lr, wd, beta2);
  }
  EXPECT_LT(max_rel_error(vec(p), pd), 1e-5);
  EXPECT_LT(max_rel_error(vec(v), vd), 1e-5);
}

// The two halves of the definition on their own: with weight decay only, an element whose
// (scaled) update and parameter disagree in sign moves by the update alone, one that agrees also
// decays by lr wd p; and the scaled update keeps the norm of g (||p - p0|| = lr ||g|| at wd = 0).
TEST_P(NorMuon, DecaysOnlyWhereUpdateAndParameterAgreeAndKeepsTheNorm) {
  auto [rows, cols] = GetParam();
  const int64_t k = rows >= cols ? rows : cols;
  Tensor p = randn({rows, cols}, 70), g = randn({rows, cols}, 71);
  Tensor v0 = Tensor::zeros({k}, DType::F32), v1 = Tensor::zeros({k}, DType::F32);
  Tensor decayed = p.copy_to(Device::cpu()), plain = p.copy_to(Device::cpu());
  const float lr = 0.01f, wd = 0.5f;
  ops::normuon_update(decayed, g, v0, lr, wd, 0.9f);
  ops::normuon_update(plain, g, v1, lr, 0.f, 0.9f);
  double moved = 0, gsq = 0;
  int64_t agree = 0, disagree = 0;
  for (int64_t i = 0; i < rows * cols; i++) {
    const double p0 = p.data<float>()[i], step = plain.data<float>()[i] - p0;  // -lr g'
    moved += step * step;
    gsq += double(g.data<float>()[i]) * g.data<float>()[i];
    const double extra = decayed.data<float>()[i] - plain.data<float>()[i];
    // g' has g's sign (positive scales), so the update agrees with p where g p >= 0
    if (g.data<float>()[i] * p0 >= 0) {
      agree++;
      EXPECT_NEAR(extra, -lr * wd * p0, 1e-6) << i;  // f32 rounding of p near 1: a few 1e-7
    } else {
      disagree++;
      EXPECT_NEAR(extra, 0.0, 1e-6) << i;
    }
  }
  EXPECT_GT(agree, 0);
  EXPECT_GT(disagree, 0);
  // ||lr g'|| = lr ||g||: f32 rounding of p (~6e-8 absolute each) against steps of ~lr; 1e-3 relative.
  EXPECT_NEAR(std::sqrt(moved), lr * std::sqrt(gsq), 1e-3 * lr * std::sqrt(gsq));
}

INSTANTIATE_TEST_SUITE_P(Shapes, NorMuon,
                         ::testing::Values(std::pair<int64_t, int64_t>{48, 16}, std::pair<int64_t, int64_t>{20, 20},
                                           std::pair<int64_t, int64_t>{12, 40}));

}  // namespace
}  // namespace nanoddp
