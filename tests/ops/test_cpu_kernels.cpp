// Forward kernels of the CPU backend against the double-precision references.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "ops/backend.h"
#include "ops/cpu/kernels.h"
#include "ops/ops.h"

namespace nanoddp {
namespace {

using testing::max_rel_error;
using testing::randint;
using testing::randn;
using testing::tensor;
using testing::vec;

struct MatmulCase {
  int64_t m, n, k;
  bool ta, tb;
};

class MatmulTest : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTest, MatchesReferenceWithAlphaBeta) {
  auto [m, n, k, ta, tb] = GetParam();
  Tensor a = randn(ta ? Shape{k, m} : Shape{m, k}, 1);
  Tensor b = randn(tb ? Shape{n, k} : Shape{k, n}, 2);
  Tensor c = randn({m, n}, 3);
  auto c0 = vec(c);
  ops::matmul(c, a, ta, b, tb, 0.5f, 2.0f);
  auto want = reference::matmul(vec(a), ta, vec(b), tb, m, n, k);
  for (size_t i = 0; i < want.size(); i++) want[i] = 0.5 * want[i] + 2.0 * c0[i];
  EXPECT_LT(max_rel_error(vec(c), want), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTest,
                         ::testing::Values(MatmulCase{1, 1, 1, false, false}, MatmulCase{7, 5, 3, false, true},
                                           MatmulCase{33, 17, 65, true, false}, MatmulCase{64, 96, 40, true, true},
                                           MatmulCase{130, 3, 257, false, false}));

// bf16 operands (Note [bf16 matmul on the CPU]): against the double-precision product of the very
// bf16 values, so only accumulation and the final rounding can differ. Tolerances: an f32 result
// sums k <= 257 products of f32-exact values in f32 (each addition within 2^-24 relative, so well
// under k * 2^-24 ~ 1.5e-5 of the largest partial sums; in practice ~1e-6); a bf16 result is also
// rounded once to 8 significant bits, half an ulp = 2^-9 ~ 2e-3 of each element, so 4e-3 of the
// largest leaves room for both. A kernel that reads a transpose wrongly is off by O(1).
class Bf16MatmulTest : public ::testing::TestWithParam<MatmulCase> {};

Tensor to_bf16(const Tensor& f) {
  Tensor t = Tensor::empty(f.shape(), DType::BF16);
  ops::cast(t, f);
  return t;
}

TEST_P(Bf16MatmulTest, MatchesTheReferenceOfItsBf16InputsIntoF32AndBf16) {
  auto [m, n, k, ta, tb] = GetParam();
  const Tensor a = to_bf16(randn(ta ? Shape{k, m} : Shape{m, k}, 11));
  const Tensor b = to_bf16(randn(tb ? Shape{n, k} : Shape{k, n}, 12));
  const auto product = reference::matmul(vec(a), ta, vec(b), tb, m, n, k);  // vec() widens bf16 exactly
  for (bool bf16_out : {false, true}) {
    for (auto [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{0.5f, 2.f}}) {
      Tensor c = randn({m, n}, 13);
      if (bf16_out) c = to_bf16(c);
      const auto c0 = vec(c);
      ops::matmul(c, a, ta, b, tb, alpha, beta);
      auto want = product;
      for (size_t i = 0; i < want.size(); i++) want[i] = alpha * want[i] + beta * c0[i];
      EXPECT_LT(max_rel_error(vec(c), want), bf16_out ? 4e-3 : 2e-5)
          << (bf16_out ? "bf16" : "f32") << " out, alpha " << alpha << " beta " << beta;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16MatmulTest,
                         ::testing::Values(MatmulCase{1, 1, 1, false, false}, MatmulCase{7, 5, 3, false, true},
                                           MatmulCase{33, 17, 65, true, false}, MatmulCase{64, 96, 40, true, true},
                                           MatmulCase{130, 3, 257, false, false}));

// A small result over a long reduction runs as slices of k side by side, one per thread (Note
// [GEMMs split along k]), here with 2 and 3 threads (an uneven cut), every transpose, alpha and
// beta, f32 and bf16 operands. Against the double-precision product of the same values: f32 sums of
// 1100 Gaussian products err like a random walk, ~sqrt(k) 2^-24 of a term (~1e-7 of the largest
// result here); 1e-4 is a thousand times that, while a slice dropped, doubled or added to the wrong
// rows is off by ~0.3 or more.
TEST(Matmul, LongReductionsSplitAlongKMatchTheReference) {
  const int64_t m = 24, n = 40, k = 1100;
  const int before = ops::cpu_threads();
  for (int threads : {2, 3}) {
    ops::set_cpu_threads(threads);
    ASSERT_TRUE(ops::cpu::split_along_k(m, n, k, threads));
    for (DType t : {DType::F32, DType::BF16})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          Tensor a = randn(ta ? Shape{k, m} : Shape{m, k}, 41), b = randn(tb ? Shape{n, k} : Shape{k, n}, 42);
          if (t == DType::BF16) a = to_bf16(a), b = to_bf16(b);
          Tensor c = randn({m, n}, 43);
          const auto c0 = vec(c);
          ops::matmul(c, a, ta, b, tb, 0.5f, 2.f);
          auto want = reference::matmul(vec(a), ta, vec(b), tb, m, n, k);
          for (size_t i = 0; i < want.size(); i++) want[i] = 0.5 * want[i] + 2.0 * c0[i];
          EXPECT_LT(max_rel_error(vec(c), want), 1e-4)
              << threads << " threads, " << dtype_name(t) << ", ta " << ta << " tb " << tb;
        }
  }
  ops::set_cpu_threads(before);
}

TEST(Embedding, ForwardGathersRowsAndBackwardScattersRepeats) {
  const int64_t v = 11, c = 70, n = 40;
  Tensor table = randn({v, c}, 4);
  Tensor ids = randint({n}, 5, 0, v);
  Tensor out = Tensor::empty({n, c}, DType::F32);
  ops::embedding_forward(out, table, ids);
  EXPECT_EQ(max_rel_error(vec(out), reference::embedding(vec(table), testing::ints(ids), c)), 0.0);

  Tensor dout = randn({n, c}, 6);
  Tensor dtable = randn({v, c}, 7);
  auto want = vec(dtable);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < c; j++) want[ids.data<int32_t>()[i] * c + j] += dout.data<float>()[i * c + j];
  ops::embedding_backward(dtable, dout, ids);
  EXPECT_LT(max_rel_error(vec(dtable), want), 1e-6);
}

TEST(Embedding, OutOfRangeIdIsAnError) {
  Tensor table = randn({4, 8}, 1);
  Tensor ids = Tensor::zeros({2}, DType::I32);
  ids.data<int32_t>()[1] = 4;
  Tensor out = Tensor::empty({2, 8}, DType::F32);
  EXPECT_THROW(ops::embedding_forward(out, table, ids), Error);
  // The backward, called directly, checks too: was a write past the table.
  Tensor dtable = Tensor::zeros({4, 8}, DType::F32);
  EXPECT_THROW(ops::embedding_backward(dtable, randn({2, 8}, 2), ids), Error);
  EXPECT_EQ(testing::to_vector(dtable), std::vector<float>(32, 0.f)) << "rows were added before the check";
}

// The row reductions' order is the code's (Note [row reductions in fixed lanes]): element j goes
// to lane j % Lanes, the lanes are then folded in halves. Values chosen so that f32 rounding tells
// orders apart: 2^24 + 1 is lost when added to 2^24 alone but kept once two ones meet first.
TEST(RowReductions, FollowTheirFixedLaneOrder) {
  using ops::cpu::lane_max;
  using ops::cpu::lane_sum;
  for (int64_t n : {0, 1, 3, 4, 5, 8, 13, 35}) {
    std::vector<float> x(n);
    for (int64_t j = 0; j < n; j++) x[j] = (j % 4 == 0) ? 16777216.f * (j == 0) + 1.f * (j != 0) : 1.f;
    // The same order written out: lanes of 4, folded 0+2, 1+3, then 0+1.
    float lane[4] = {0, 0, 0, 0};
    for (int64_t j = 0; j < n; j++) lane[j % 4] += x[j];
    const float want = (lane[0] + lane[2]) + (lane[1] + lane[3]);
    const auto term = [&](int64_t j) { return x[j]; };
    EXPECT_EQ((lane_sum<float, 4>(n, term)), want) << "n = " << n;
    // Doubles hold every partial sum here exactly.
    double exact = 0;
    for (float v : x) exact += v;
    EXPECT_EQ((lane_sum<double, 4>(n, [&](int64_t j) { return double(x[j]); })), exact) << "n = " << n;
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
      x[j] = std::sin(0.7f * j) * j;
      mx = std::max(mx, x[j]);
    }
    EXPECT_EQ(lane_max<4>(n, term), mx) << "n = " << n;
    EXPECT_EQ(lane_max<16>(n, term), mx) << "n = " << n;
  }
}

TEST(RmsNorm, ForwardMatchesReference) {
  const int64_t rows = 37, c = 129;
  const float eps = 1.1920929e-07f;
  Tensor x = randn({rows, c}, 8, 3.f);
  Tensor y = Tensor::empty({rows, c}, DType::F32), rstd = Tensor::empty({rows}, DType::F32);
  ops::rmsnorm_forward(y, rstd, x, eps);
  EXPECT_LT(max_rel_error(vec(y), reference::rmsnorm(vec(x), c, eps)), 1e-6);
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t j = 0; j < c; j++) ss += std::pow(x.data<float>()[r * c + j], 2);
    EXPECT_NEAR(rstd.data<float>()[r], 1 / std::sqrt(ss / c + eps), 1e-6 / std::sqrt(ss / c));
  }
}

// Rotary tables as the model builds them: angles in f32, rounded to bf16.
std::pair<Tensor, Tensor> rotary_tables(int64_t rows, int64_t d) {
  Tensor cos = Tensor::empty({rows, d / 2}, DType::F32), sin = Tensor::empty({rows, d / 2}, DType::F32);
  for (int64_t t = 0; t < rows; t++)
    for (int64_t i = 0; i < d / 2; i++) {
      float inv_freq = 1.f / std::pow(10000.f, 2.f * i / d);
      cos.data<float>()[t * d / 2 + i] = round_to_bf16(std::cos(t * inv_freq));
      sin.data<float>()[t * d / 2 + i] = round_to_bf16(std::sin(t * inv_freq));
    }
  return {cos, sin};
}

TEST(Rotary, ForwardMatchesReferenceAndInverseUndoesIt) {
  const int64_t b = 2, t = 9, h = 3, d = 16, pos0 = 5;
  auto [cos, sin] = rotary_tables(32, d);
  Tensor x = randn({b, t, h, d}, 9);
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  ops::rotary(y, x, cos, sin, pos0, false);
  EXPECT_LT(max_rel_error(vec(y), reference::rotary(vec(x), b, t, h, d, vec(cos), vec(sin), pos0, false)), 1e-6);
  // cos and sin were rounded separately, so the rotation is only nearly orthogonal: x comes back
  // to within the bf16 rounding of cos^2 + sin^2.
  ops::rotary(y, y, cos, sin, pos0, true);
  EXPECT_LT(max_rel_error(vec(y), vec(x)), 1e-2);
}

struct AttentionCase {
  int64_t b, tq, tcap, kv_len, hq, hkv, d;
};

class AttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionTest, ForwardMatchesReference) {
  auto [b, tq, tcap, kv_len, hq, hkv, d] = GetParam();
  Tensor q = randn({b, tq, hq, d}, 10), k = randn({b, tcap, hkv, d}, 11), v = randn({b, tcap, hkv, d}, 12);
  Tensor out = Tensor::empty(q.shape(), DType::F32), lse = Tensor::empty({b, hq, tq}, DType::F32);
  const float scale = 1.f / std::sqrt(float(d));
  ops::attention_forward(out, lse, q, k, v, kv_len, scale, 0);
  reference::Vec want_lse;
  auto want = reference::attention(vec(q), vec(k), vec(v), b, tq, tcap, hq, hkv, d, kv_len, scale, &want_lse);
  EXPECT_LT(max_rel_error(vec(out), want), 2e-6);
  EXPECT_LT(max_rel_error(vec(lse), want_lse), 2e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(AttentionCase{1, 1, 1, 1, 1, 1, 8},          // a single token
                      AttentionCase{2, 13, 13, 13, 4, 4, 16},      // multi-head
                      AttentionCase{2, 17, 17, 17, 6, 2, 8},       // grouped-query (3 q heads per kv head)
                      AttentionCase{1, 200, 200, 200, 2, 1, 32},   // more rows than one query tile
                      AttentionCase{2, 3, 20, 11, 4, 2, 16},       // decoding: 3 new queries after 8 cached
                      AttentionCase{1, 1, 64, 40, 2, 2, 128}));    // one new token, head_dim 128

// Sliding-window attention (ops.h: the query at position p sees keys max(0, p - window) ..= p)
// against the reference's masked softmax. Windows of 1, below and across the 128-query tiles (37,
// 100, 129: the tiles' key ranges start mid-way), T - 2 (the widest that masks a key), and the
// widths that are full causal attention (T - 1, T, beyond T).
struct WindowCase {
  int64_t b, tq, tcap, kv_len, hq, hkv, d, window;
};

class WindowedAttention : public ::testing::TestWithParam<WindowCase> {};

TEST_P(WindowedAttention, ForwardMatchesMaskedReference) {
  auto [b, tq, tcap, kv_len, hq, hkv, d, window] = GetParam();
  Tensor q = randn({b, tq, hq, d}, 40), k = randn({b, tcap, hkv, d}, 41), v = randn({b, tcap, hkv, d}, 42);
  Tensor out = Tensor::empty(q.shape(), DType::F32), lse = Tensor::empty({b, hq, tq}, DType::F32);
  const float scale = 1.f / std::sqrt(float(d));
  ops::attention_forward(out, lse, q, k, v, kv_len, scale, window);
  reference::Vec want_lse;
  auto want = reference::attention(vec(q), vec(k), vec(v), b, tq, tcap, hq, hkv, d, kv_len, scale, &want_lse, window);
  // As ForwardMatchesReference: f32 sums of at most a few hundred terms against double.
  EXPECT_LT(max_rel_error(vec(out), want), 2e-6);
  EXPECT_LT(max_rel_error(vec(lse), want_lse), 2e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WindowedAttention,
    ::testing::Values(WindowCase{1, 9, 9, 9, 2, 1, 8, 1},            // itself and one key before
                      WindowCase{2, 13, 13, 13, 4, 2, 16, 11},       // T - 2: only key 0 of the last row masked
                      WindowCase{2, 13, 13, 13, 4, 2, 16, 12},       // T - 1: full causal
                      WindowCase{1, 13, 13, 13, 2, 2, 16, 13},       // T
                      WindowCase{1, 13, 13, 13, 2, 2, 16, 50},       // beyond T
                      WindowCase{1, 300, 300, 300, 2, 1, 16, 37},    // three query tiles, a narrow band
                      WindowCase{2, 300, 300, 300, 3, 3, 8, 100},
                      WindowCase{1, 300, 300, 300, 2, 1, 16, 129},   // just over a tile
                      WindowCase{2, 3, 40, 30, 4, 2, 16, 5},         // decoding: 3 queries after 27 cached
                      WindowCase{1, 1, 64, 50, 2, 2, 32, 7},         // one new token
                      WindowCase{1, 140, 200, 190, 2, 1, 8, 60}));   // a long prompt after 50 cached

// The window's meaning, without the reference: one decoded token with window w attends exactly as
// full attention over the w + 1 newest cached positions does (nanochat's SDPA fallback slices its
// cache to window + 1 keys the same way).
TEST(WindowedAttentionTest, DecodingSeesItselfAndTheWindowBeforeIt) {
  const int64_t hq = 4, hkv = 2, d = 16, cap = 64, kv_len = 50;
  const float scale = 0.25f;
  Tensor q = randn({1, 1, hq, d}, 43), k = randn({1, cap, hkv, d}, 44), v = randn({1, cap, hkv, d}, 45);
  for (int64_t w : {1, 7, 31}) {
    Tensor out = Tensor::empty(q.shape(), DType::F32), lse = Tensor::empty({1, hq, 1}, DType::F32);
    ops::attention_forward(out, lse, q, k, v, kv_len, scale, w);
    const int64_t row = hkv * d, first = kv_len - 1 - w;
    Tensor ks = k.region(first * row, {1, w + 1, hkv, d}), vs = v.region(first * row, {1, w + 1, hkv, d});
    Tensor want = Tensor::empty(q.shape(), DType::F32), want_lse = Tensor::empty({1, hq, 1}, DType::F32);
    ops::attention_forward(want, want_lse, q, ks, vs, w + 1, scale, 0);
    // The same terms, summed by kernels that may split them differently: f32 rounding only.
    EXPECT_LT(max_rel_error(vec(out), vec(want)), 1e-6) << "window " << w;
    EXPECT_LT(max_rel_error(vec(lse), vec(want_lse)), 1e-6) << "window " << w;
  }
}

// The decode path honours the window as training does: a sequence attended at once and the same
// sequence decoded one token at a time from its cache give the same outputs and log-sum-exps, with
// windows that cross the 128-query tiles of the first.
TEST(WindowedAttentionTest, DecodingTokenByTokenMatchesTheWholeSequence) {
  const int64_t t = 150, hq = 4, hkv = 2, d = 16;
  const float scale = 0.25f;
  Tensor q = randn({1, t, hq, d}, 50), k = randn({1, t, hkv, d}, 51), v = randn({1, t, hkv, d}, 52);
  for (int64_t w : {1, 40, 130}) {
    Tensor out = Tensor::empty(q.shape(), DType::F32), lse = Tensor::empty({1, hq, t}, DType::F32);
    ops::attention_forward(out, lse, q, k, v, t, scale, w);
    std::vector<float> steps, step_lse;
    for (int64_t i = 0; i < t; i++) {
      Tensor o1 = Tensor::empty({1, 1, hq, d}, DType::F32), l1 = Tensor::empty({1, hq, 1}, DType::F32);
      ops::attention_forward(o1, l1, q.region(i * hq * d, {1, 1, hq, d}), k, v, i + 1, scale, w);
      auto ov = testing::to_vector(o1), lv = testing::to_vector(l1);
      steps.insert(steps.end(), ov.begin(), ov.end());
      step_lse.insert(step_lse.end(), lv.begin(), lv.end());
    }
    // lse is [1, hq, t]; the steps gave it position by position: [t, hq].
    reference::Vec want_lse(t * hq), got_lse(t * hq);
    for (int64_t i = 0; i < t; i++)
      for (int64_t h = 0; h < hq; h++) {
        want_lse[i * hq + h] = lse.data<float>()[h * t + i];
        got_lse[i * hq + h] = step_lse[i * hq + h];
      }
    // The same terms through GEMMs of other shapes (sums split differently): f32 rounding only.
    EXPECT_LT(max_rel_error(reference::Vec(steps.begin(), steps.end()), vec(out)), 1e-6) << "window " << w;
    EXPECT_LT(max_rel_error(got_lse, want_lse), 1e-6) << "window " << w;
  }
}

// A window reaching key 0 from every query is full causal attention, bit for bit, forward and
// backward (the classic model passes 0; nanochat's long layers pass T).
TEST(WindowedAttentionTest, AWindowThatReachesKeyZeroGivesTheFullCausalBits) {
  const int64_t b = 1, t = 150, hq = 2, d = 16;
  Tensor q = randn({b, t, hq, d}, 46), k = randn({b, t, hq, d}, 47), v = randn({b, t, hq, d}, 48);
  Tensor dout = randn({b, t, hq, d}, 49);
  auto run = [&](int64_t window) {
    std::vector<Tensor> r;
    for (int i = 0; i < 5; i++) r.push_back(Tensor::empty(q.shape(), DType::F32));
    Tensor lse = Tensor::empty({b, hq, t}, DType::F32);
    ops::attention_forward(r[0], lse, q, k, v, t, 0.25f, window);
    ops::attention_backward(r[1], r[2], r[3], dout, q, k, v, r[0], lse, 0.25f, window);
    r[4] = lse;
    std::vector<float> all;
    for (const Tensor& x : r) {
      auto xs = testing::to_vector(x);
      all.insert(all.end(), xs.begin(), xs.end());
    }
    return all;
  };
  const auto full = run(0);
  for (int64_t w : {t - 1, t, t + 7, int64_t{-1}}) EXPECT_EQ(run(w), full) << "window " << w;
  EXPECT_NE(run(t - 2), full);  // the widest window that still masks a key (row t - 1's key 0)
}

TEST(Relu2, Forward) {
  Tensor x = randn({1000}, 13);
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  ops::relu2_forward(y, x);
  EXPECT_LT(max_rel_error(vec(y), reference::relu2(vec(x))), 1e-7);  // one f32 rounding
}

TEST(SoftcapCrossEntropy, LossesMatchReferenceAndEvalLeavesLogits) {
  const int64_t n = 19, vpad = 128, vocab = 100;
  Tensor logits = randn({n, vpad}, 14, 20.f);  // large logits: the cap matters
  Tensor targets = randint({n}, 15, 0, vocab);
  targets.data<int32_t>()[3] = -1;
  auto before = vec(logits);
  Tensor losses = Tensor::empty({n}, DType::F32);
  ops::softcap_cross_entropy(losses, logits, targets, vocab, 15.f, 0.f);
  auto want = reference::softcap_cross_entropy(before, testing::ints(targets), vpad, vocab, 15.0);
  EXPECT_LT(max_rel_error(vec(losses), want), 2e-6);
  EXPECT_EQ(losses.data<float>()[3], 0.f);
  EXPECT_EQ(vec(logits), before);
}

TEST(SoftcapCrossEntropy, PaddingColumnsNeverEnterTheSoftmax) {
  const int64_t n = 4, vpad = 64, vocab = 50;
  Tensor logits = randn({n, vpad}, 16);
  Tensor targets = randint({n}, 17, 0, vocab);
  Tensor l1 = Tensor::empty({n}, DType::F32), l2 = Tensor::empty({n}, DType::F32);
  ops::softcap_cross_entropy(l1, logits, targets, vocab, 15.f, 0.f);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = vocab; j < vpad; j++) logits.data<float>()[i * vpad + j] = 1e4f;
  ops::softcap_cross_entropy(l2, logits, targets, vocab, 15.f, 0.f);
  EXPECT_EQ(vec(l1), vec(l2));
}

TEST(Threads, KernelsGiveTheSameBitsOnOneAndTwoThreads) {
  // Bitwise-reproducible training needs kernels whose results do not depend on the thread count.
  // The embedding's n c = 65536 is above kParallelGrain (16384), so two threads do split its channels.
  const int64_t b = 2, t = 40, h = 2, d = 16, v = 30, c = 64, n = 1024;
  Tensor q = randn({b, t, h, d}, 20), k = randn({b, t, h, d}, 21), vv = randn({b, t, h, d}, 22);
  Tensor dout = randn({b, t, h, d}, 23), ids = randint({n}, 24, 0, v), demb = randn({n, c}, 25);
  auto run = [&](int threads) {
    ops::set_cpu_threads(threads);
    Tensor out = Tensor::empty(q.shape(), DType::F32), lse = Tensor::empty({b, h, t}, DType::F32);
    Tensor dq = Tensor::empty(q.shape(), DType::F32), dk = Tensor::empty(q.shape(), DType::F32),
           dv = Tensor::empty(q.shape(), DType::F32), table = Tensor::zeros({v, c}, DType::F32);
    ops::attention_forward(out, lse, q, k, vv, t, 0.25f, 0);
    ops::attention_backward(dq, dk, dv, dout, q, k, vv, out, lse, 0.25f, 0);
    ops::embedding_backward(table, demb, ids);
    // And with a sliding window.
    Tensor wout = Tensor::empty(q.shape(), DType::F32), wdq = Tensor::empty(q.shape(), DType::F32),
           wdk = Tensor::empty(q.shape(), DType::F32), wdv = Tensor::empty(q.shape(), DType::F32);
    ops::attention_forward(wout, lse, q, k, vv, t, 0.25f, 9);
    ops::attention_backward(wdq, wdk, wdv, dout, q, k, vv, wout, lse, 0.25f, 9);
    std::vector<float> all;
    for (const Tensor& x : {out, dq, dk, dv, table, wout, wdq, wdk, wdv}) {
      auto xs = testing::to_vector(x);
      all.insert(all.end(), xs.begin(), xs.end());
    }
    return all;
  };
  int before = ops::cpu_threads();
  auto one = run(1), two = run(2);
  ops::set_cpu_threads(before);
  EXPECT_EQ(one, two);
}

// bf16 attention runs each head's GEMMs on oneDNN's bf16 matmul inside the parallel loop over heads,
// each on its own thread: the thread count must not change a bit of it either.
TEST(Threads, Bf16AttentionGivesTheSameBitsOnOneAndTwoThreads) {
  const int64_t b = 2, t = 150, h = 2, d = 32;
  const Tensor q = to_bf16(randn({b, t, h, d}, 30)), k = to_bf16(randn({b, t, h, d}, 31)),
               v = to_bf16(randn({b, t, h, d}, 32)), dout = to_bf16(randn({b, t, h, d}, 33));
  auto run = [&](int threads) {
    ops::set_cpu_threads(threads);
    Tensor out = Tensor::empty(q.shape(), DType::BF16), lse = Tensor::empty({b, h, t}, DType::F32);
    Tensor dq = Tensor::empty(q.shape(), DType::BF16), dk = Tensor::empty(q.shape(), DType::BF16),
           dv = Tensor::empty(q.shape(), DType::BF16);
    ops::attention_forward(out, lse, q, k, v, t, 0.25f, 0);
    ops::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, 0.25f, 0);
    std::vector<double> all;
    for (const Tensor& x : {out, lse, dq, dk, dv}) {
      auto xs = vec(x);
      all.insert(all.end(), xs.begin(), xs.end());
    }
    return all;
  };
  const int before = ops::cpu_threads();
  auto one = run(1), two = run(2);
  ops::set_cpu_threads(before);
  EXPECT_EQ(one, two);
}

}  // namespace
}  // namespace nanoddp
