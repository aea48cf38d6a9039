// The Hopper forward (ops/cuda/attention_hopper.cuh, wgmma and TMA) against the mma.sync flash
// forward on the same GPU inputs, over the shapes whose index arithmetic differs: causal and sliding
// window, grouped-query heads, head_dim 64, 96 (run at width 128) and 128, sequences that are not a
// multiple of the tiles, and the decoding form (fewer queries than keys, a cache longer than kv_len
// whose rows past kv_len hold NaN, which neither kernel may read); and the Hopper backward against
// the mma.sync backward, and against itself run twice. Skips without an sm_90 GPU.
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "core/cuda_util.h"
#include "cuda_test_util.h"
#include "ops/cuda/attention.cuh"
#include "ops/cuda/attention_flash.cuh"
#include "ops/cuda/attention_hopper.cuh"

namespace nanoddp {
namespace {

using testing::kBf16Eps;
using testing::poisoned;
using testing::randn;
using testing::to_gpu;
using testing::to_host;
using testing::tol;

#define REQUIRE_HOPPER()                                                   \
  do {                                                                     \
    NANODDP_REQUIRE_GPU();                                                 \
    const std::string why = cuda::hopper_attention_unavailable(0);         \
    NANODDP_SKIP_UNLESS(why.empty(), "skipped: no Hopper kernel: " + why); \
  } while (0)

struct Case {
  int64_t b, tq, tcap, kv_len, hq, hkv, d, window;
  DType dt;
};

std::string name(const Case& c) {
  return fmt::format("b{} tq{} cache{} kv{} hq{} hkv{} d{} window{} {}", c.b, c.tq, c.tcap, c.kv_len, c.hq, c.hkv, c.d,
                     c.window, testing::dtype_label(c.dt));
}

// Both forwards from the same inputs. The kernels round P to the 16-bit type and accumulate in f32
// over the same 64-key tiles, so they differ only by the order of the f32 sums inside each MMA: a
// score a few f32 roundings apart can round P to the neighbouring 16-bit value, and the output is
// rounded once more; 4 roundings of the largest output bound that with room. lse is f32 and sees
// only the f32 order: 1e-5 relative, about 100 f32 roundings of the sums of 128-term products.
void check(const Case& c) {
  SCOPED_TRACE(name(c));
  Tensor k = randn({c.b, c.tcap, c.hkv, c.d}, 61), v = randn({c.b, c.tcap, c.hkv, c.d}, 62);
  for (int64_t i = 0; i < k.numel(); i++)
    if ((i / (c.hkv * c.d)) % c.tcap >= c.kv_len) k.data<float>()[i] = v.data<float>()[i] = NAN;
  Tensor q = randn({c.b, c.tq, c.hq, c.d}, 60);
  Tensor gq = to_gpu(q, c.dt), gk = to_gpu(k, c.dt), gv = to_gpu(v, c.dt);
  Tensor out_f = poisoned(q.shape(), c.dt), out_h = poisoned(q.shape(), c.dt);
  Tensor lse_f = poisoned({c.b, c.hq, c.tq}, DType::F32), lse_h = poisoned({c.b, c.hq, c.tq}, DType::F32);
  const cuda::AttentionShape s{c.b, c.tq, c.tcap, c.hq, c.hkv, c.d, c.kv_len, c.window};
  const float scale = 1.f / std::sqrt(float(c.d));
  cudaStream_t st = cuda::compute_stream(0);
  NANODDP_CUDA_CHECK(
      cuda::launch_flash_forward(c.dt, out_f.raw(), lse_f.data<float>(), gq.raw(), gk.raw(), gv.raw(), s, scale, st));
  NANODDP_CUDA_CHECK(
      cuda::launch_hopper_forward(c.dt, out_h.raw(), lse_h.data<float>(), gq.raw(), gk.raw(), gv.raw(), s, scale, st));
  NANODDP_CUDA_CHECK(cudaStreamSynchronize(st));
  const Tensor of = to_host(out_f), oh = to_host(out_h), lf = to_host(lse_f), lh = to_host(lse_h);
  double out_max = 0, out_diff = 0, lse_diff = 0;
  for (int64_t i = 0; i < of.numel(); i++) {
    const float a = of.data<float>()[i], b = oh.data<float>()[i];
    ASSERT_TRUE(std::isfinite(a) && std::isfinite(b)) << "element " << i << ": flash " << a << ", hopper " << b;
    out_max = std::max(out_max, double(std::fabs(a)));
    out_diff = std::max(out_diff, double(std::fabs(a - b)));
  }
  for (int64_t i = 0; i < lf.numel(); i++) {
    const float a = lf.data<float>()[i], b = lh.data<float>()[i];
    ASSERT_TRUE(std::isfinite(a) && std::isfinite(b)) << "lse " << i << ": flash " << a << ", hopper " << b;
    lse_diff = std::max(lse_diff, std::fabs(double(a) - b) / std::max(1.0, std::fabs(double(a))));
  }
  EXPECT_LE(out_diff, tol(c.dt, 0, 4 * kBf16Eps) * out_max);
  EXPECT_LE(lse_diff, 1e-5);
}

TEST(HopperAttention, MatchesFlashForwardCausal) {
  REQUIRE_HOPPER();
  for (DType dt : {DType::BF16, DType::F16})
    for (int64_t d : {64, 96, 128}) check({2, 300, 300, 300, 4, 2, d, 0, dt});
  check({1, 1000, 1000, 1000, 6, 6, 128, 0, DType::BF16});  // several 128-query blocks, no grouping
}

TEST(HopperAttention, MatchesFlashForwardWindowed) {
  REQUIRE_HOPPER();
  for (int64_t window : {1, 50, 64, 200}) check({2, 520, 520, 520, 4, 1, 128, window, DType::BF16});
  check({1, 700, 700, 700, 2, 2, 64, 100, DType::F16});
}

TEST(HopperAttention, MatchesFlashForwardDecoding) {
  REQUIRE_HOPPER();
  check({2, 1, 256, 200, 4, 2, 128, 0, DType::BF16});  // one new token, a longer cache
  check({2, 7, 256, 135, 4, 2, 96, 0, DType::BF16});
  check({1, 5, 512, 400, 4, 4, 128, 64, DType::BF16});  // windowed
}

// The largest |a - b| over the elements, and the largest |a|; both must be finite.
std::pair<double, double> diff(const Tensor& ga, const Tensor& gb, const char* what) {
  const Tensor a = to_host(ga), b = to_host(gb);
  double most = 0, worst = 0;
  for (int64_t i = 0; i < a.numel(); i++) {
    const float x = a.data<float>()[i], y = b.data<float>()[i];
    EXPECT_TRUE(std::isfinite(x) && std::isfinite(y)) << what << " " << i << ": flash " << x << ", hopper " << y;
    if (!std::isfinite(x) || !std::isfinite(y)) return {INFINITY, 0};
    most = std::max(most, double(std::fabs(x)));
    worst = std::max(worst, double(std::fabs(x - y)));
  }
  return {worst, most};
}

// Both backwards from the same forward (the mma.sync one's out and lse). Both round P and dS to the
// 16-bit type before their MMAs and accumulate over the same 64-query (dK, dV) and 64- or 32-key
// (dQ) tiles in f32, so they differ by the f32 order inside the MMAs: a P or dS a few roundings
// apart can round to the neighbouring 16-bit value, and each output is rounded once more; 4
// roundings of the largest gradient bound that with room. Two Hopper runs must agree bit for bit
// (no atomics: each output is written by one block, its sums in a fixed order).
void check_backward(const Case& c) {
  SCOPED_TRACE(name(c));
  const int64_t t = c.tq;
  Tensor gq = to_gpu(randn({c.b, t, c.hq, c.d}, 70), c.dt), gk = to_gpu(randn({c.b, t, c.hkv, c.d}, 71), c.dt),
         gv = to_gpu(randn({c.b, t, c.hkv, c.d}, 72), c.dt), gdo = to_gpu(randn({c.b, t, c.hq, c.d}, 73), c.dt);
  Tensor out = poisoned(gq.shape(), c.dt), lse = poisoned({c.b, c.hq, t}, DType::F32);
  const cuda::AttentionShape s{c.b, t, t, c.hq, c.hkv, c.d, t, c.window};
  const float scale = 1.f / std::sqrt(float(c.d));
  cudaStream_t st = cuda::compute_stream(0);
  NANODDP_CUDA_CHECK(
      cuda::launch_flash_forward(c.dt, out.raw(), lse.data<float>(), gq.raw(), gk.raw(), gv.raw(), s, scale, st));
  Tensor scratch = Tensor::empty({int64_t(cuda::attention_backward_scratch_bytes(s))}, DType::U8, testing::gpu());
  Tensor grads[3][3];  // [flash, hopper, hopper again][dq, dk, dv]
  for (int run = 0; run < 3; run++) {
    grads[run][0] = poisoned(gq.shape(), c.dt);
    grads[run][1] = poisoned(gk.shape(), c.dt);
    grads[run][2] = poisoned(gv.shape(), c.dt);
    NANODDP_CUDA_CHECK(cuda::launch_attention_backward(c.dt, grads[run][0].raw(), grads[run][1].raw(),
                                                       grads[run][2].raw(), gdo.raw(), gq.raw(), gk.raw(), gv.raw(),
                                                       out.raw(), lse.data<float>(), s, scale, scratch.raw(), false, st,
                                                       /*hopper=*/run > 0));
  }
  NANODDP_CUDA_CHECK(cudaStreamSynchronize(st));
  const char* names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; i++) {
    const auto [worst, most] = diff(grads[0][i], grads[1][i], names[i]);
    EXPECT_LE(worst, tol(c.dt, 0, 4 * kBf16Eps) * most) << names[i];
    const auto [again, unused] = diff(grads[1][i], grads[2][i], names[i]);
    EXPECT_EQ(again, 0.0) << names[i] << ": two Hopper backwards differ";
  }
}

TEST(HopperAttention, MatchesFlashBackwardCausal) {
  REQUIRE_HOPPER();
  for (DType dt : {DType::BF16, DType::F16})
    for (int64_t d : {64, 96, 128}) check_backward({2, 300, 300, 300, 4, 2, d, 0, dt});
  check_backward({1, 1000, 1000, 1000, 6, 6, 128, 0, DType::BF16});
  check_backward({1, 777, 777, 777, 8, 1, 128, 0, DType::BF16});  // a group of 8 query heads per kv head
}

TEST(HopperAttention, MatchesFlashBackwardWindowed) {
  REQUIRE_HOPPER();
  for (int64_t window : {1, 50, 64, 200}) check_backward({2, 520, 520, 520, 4, 1, 128, window, DType::BF16});
  check_backward({1, 700, 700, 700, 2, 2, 64, 100, DType::F16});
}

}  // namespace
}  // namespace nanoddp
