// The sampling op (ops.h sample_tokens) on the CPU, against the definition written out plainly
// here (Note [sampling on the device], ops/sample_math.h): greedy, the top-k set with its ties, and
// the draw as the inverse of the cumulative weights in draw order. The CUDA kernel is compared
// with this CPU kernel in tests/ops/cuda/test_cuda_sample.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "ops/ops.h"
#include "ops/sample_math.h"

namespace nanoddp {
namespace {

using ops::sampling::kChunks;

// ids of one row of f32 logits [vocab] for each uniform in us (one row per uniform).
std::vector<int32_t> draw_ids(const std::vector<float>& logits, const std::vector<float>& us, float cap,
                              float temperature, int64_t top_k) {
  const int64_t rows = static_cast<int64_t>(us.size()), vocab = static_cast<int64_t>(logits.size());
  Tensor l = Tensor::empty({rows, vocab + 3}, DType::F32), u = Tensor::empty({rows}, DType::F32),
         ids = Tensor::empty({rows}, DType::I32);
  for (int64_t r = 0; r < rows; r++) {
    std::copy(logits.begin(), logits.end(), l.data<float>() + r * (vocab + 3));
    for (int64_t j = vocab; j < vocab + 3; j++) l.data<float>()[r * (vocab + 3) + j] = 1e9f;  // padding: never read
    u.data<float>()[r] = us[r];
  }
  ops::sample_tokens(ids, l, u, vocab, cap, temperature, top_k);
  return {ids.data<int32_t>(), ids.data<int32_t>() + rows};
}

// The ids in draw order: chunk 0 (ids 0, kChunks, 2 kChunks, ...), then chunk 1, ...
std::vector<int64_t> draw_order(int64_t vocab) {
  std::vector<int64_t> order;
  for (int64_t c = 0; c < kChunks; c++)
    for (int64_t j = c; j < vocab; j += kChunks) order.push_back(j);
  return order;
}

// The definition, in double with the library's exp: the kept ids in draw order (the top k by
// value, ties at the k-th value first in draw order) and their cumulative weights, normalised.
struct Cdf {
  std::vector<int64_t> ids;
  std::vector<double> cum;  // cum[i] = P(drawn id is one of ids[0..i])
};
Cdf reference(const std::vector<float>& z, float temperature, int64_t top_k) {
  const int64_t vocab = static_cast<int64_t>(z.size());
  const std::vector<int64_t> order = draw_order(vocab);
  std::vector<int64_t> by_value(order);
  // Stable: equal values keep their draw order, so the first k are the kept ones.
  std::stable_sort(by_value.begin(), by_value.end(), [&](int64_t a, int64_t b) { return z[a] > z[b]; });
  const int64_t k = top_k > 0 && top_k < vocab ? top_k : vocab;
  std::vector<bool> keep(vocab, false);
  for (int64_t i = 0; i < k; i++) keep[by_value[i]] = true;
  const double mx = *std::max_element(z.begin(), z.end());
  Cdf cdf;
  double sum = 0;
  for (int64_t j : order) {
    if (!keep[j]) continue;
    sum += std::exp((z[j] - mx) / temperature);
    cdf.ids.push_back(j);
    cdf.cum.push_back(sum);
  }
  for (double& c : cdf.cum) c /= sum;
  return cdf;
}

TEST(SampleMath, ExpAndTanhAreWithinAFewUnitsOfTheLibrarys) {
  // Tolerance: 4 units of float's last place (2^-21 relative): the polynomial's error is under
  // 1e-8 and each of its 8 fmas rounds once; a wrong constant is off by far more.
  for (float x = -87.f; x <= 0.f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(ops::sampling::portable_exp(x), want, want * 0x1p-21) << x;
  }
  EXPECT_EQ(ops::sampling::portable_exp(-100.f), 0.f);
  // tanh: relative 2^-21 plus 2e-7 absolute (the subtraction near 0 loses relative digits).
  for (float x = -12.f; x <= 12.f; x += 0.00731f) {
    const double want = std::tanh(static_cast<double>(x));
    EXPECT_NEAR(ops::sampling::portable_tanh(x), want, std::abs(want) * 0x1p-21 + 2e-7) << x;
  }
  EXPECT_EQ(ops::sampling::capped(-0.f, 15.f), 0.f);
  EXPECT_FALSE(std::signbit(ops::sampling::capped(-0.f, 15.f))) << "-0 must become +0";
}

TEST(SampleTokens, GreedyTakesTheLargestAndTheLowestIdAmongEquals) {
  std::vector<float> l(700, -1.f);
  l[400] = 3.f;
  l[650] = 3.f;
  l[9] = 2.9f;
  EXPECT_EQ(draw_ids(l, {0.99f}, 0.f, 0.f, 0)[0], 400);
  EXPECT_EQ(draw_ids(l, {0.99f}, 15.f, -1.f, 5)[0], 400);  // temperature <= 0: greedy, top_k aside
  // The soft cap keeps the order: 30 and 31 capped at 15 are 14.5 and 14.6.
  l[650] = 31.f;
  l[400] = 30.f;
  EXPECT_EQ(draw_ids(l, {0.f}, 15.f, 0.f, 0)[0], 650);
}

// Logits on a coarse grid (many ties), vocabularies from 5 to past two rounds of chunks, top_k
// from 1 to all, two temperatures: each u's id is the reference's inverse CDF at u. Uniforms
// within 1e-6 of a boundary are skipped (the op's float weights and chunked double sums differ
// from the reference's double exp in the last bits); a wrong order, tie rule or top-k set moves
// whole intervals.
TEST(SampleTokens, DrawIsTheInverseCdfInDrawOrderOverTheTopK) {
  Rng rng(5);
  int checked = 0;
  for (int64_t vocab : {5, 300, 700}) {
    std::vector<float> l(vocab);
    for (float& x : l) x = std::floor(rng.uniform() * 8.f) * 0.75f - 3.f;  // 8 values: ties everywhere
    for (int64_t top_k : {int64_t(1), int64_t(3), int64_t(50), vocab - 1, int64_t(0)}) {
      for (float temperature : {1.f, 0.6f}) {
        std::vector<float> us;
        for (int i = 0; i < 400; i++) us.push_back(rng.uniform());
        const auto ids = draw_ids(l, us, 0.f, temperature, top_k);
        const Cdf cdf = reference(l, temperature, top_k);
        for (size_t i = 0; i < us.size(); i++) {
          const auto it = std::upper_bound(cdf.cum.begin(), cdf.cum.end(), static_cast<double>(us[i]));
          const size_t at = std::min<size_t>(it - cdf.cum.begin(), cdf.ids.size() - 1);
          const double lo = at == 0 ? 0 : cdf.cum[at - 1];
          if (us[i] - lo < 1e-6 || cdf.cum[at] - us[i] < 1e-6) continue;
          EXPECT_EQ(ids[i], cdf.ids[at]) << "vocab " << vocab << " top_k " << top_k << " u " << us[i];
          checked++;
        }
      }
    }
  }
  EXPECT_GT(checked, 5000);
}

TEST(SampleTokens, TopKDrawsOnlyTheKKeptIdsAndEachOfThem) {
  // 600 ids, all tied but 10 above: top_k 30 keeps the 10 and the first 20 ties in draw order.
  std::vector<float> l(600, 0.f);
  for (int j = 0; j < 10; j++) l[j * 37] = 1.f;
  std::vector<float> us;
  for (int i = 0; i < 3000; i++) us.push_back((i + 0.5f) / 3000.f);
  const auto ids = draw_ids(l, us, 15.f, 1.f, 30);
  std::vector<int64_t> kept;
  for (int j = 0; j < 10; j++) kept.push_back(j * 37);
  for (int64_t j : draw_order(600)) {
    if (kept.size() == 30) break;
    if (l[j] == 0.f) kept.push_back(j);
  }
  std::vector<int64_t> drawn(ids.begin(), ids.end());
  std::sort(drawn.begin(), drawn.end());
  drawn.erase(std::unique(drawn.begin(), drawn.end()), drawn.end());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(drawn, kept);
}

TEST(SampleTokens, Bf16LogitsDrawAsTheirF32Values) {
  Rng rng(9);
  const int64_t rows = 64, vocab = 1000;
  Tensor f = Tensor::empty({rows, vocab}, DType::F32), b = Tensor::empty({rows, vocab}, DType::BF16),
         u = Tensor::empty({rows}, DType::F32), ids_f = Tensor::empty({rows}, DType::I32),
         ids_b = Tensor::empty({rows}, DType::I32);
  for (int64_t i = 0; i < f.numel(); i++) f.data<float>()[i] = round_to_bf16(4.f * rng.normal());
  ops::cast(b, f);
  for (int64_t r = 0; r < rows; r++) u.data<float>()[r] = rng.uniform();
  ops::sample_tokens(ids_f, f, u, vocab, 15.f, 0.8f, 40);
  ops::sample_tokens(ids_b, b, u, vocab, 15.f, 0.8f, 40);
  int distinct = 0;
  for (int64_t r = 0; r < rows; r++) {
    EXPECT_EQ(ids_f.data<int32_t>()[r], ids_b.data<int32_t>()[r]) << r;
    distinct += ids_f.data<int32_t>()[r] != ids_f.data<int32_t>()[0] ? 1 : 0;
  }
  EXPECT_GT(distinct, 0);
}

}  // namespace
}  // namespace nanoddp
