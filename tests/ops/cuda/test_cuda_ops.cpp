// Every op of the CUDA backend against the CPU backend on fresh random inputs, in the three
// activation dtypes. The CPU computes on the values the GPU tensors hold (inputs rounded to bf16
// or f16), so the tolerances only have to cover the GPU's own rounding: f32 math (about 1e-6
// relative) for f32, and the type's unit roundoff (2^-8 for bf16, 2^-11 for f16) per rounded
// result for the 16-bit types (testing::tol). Outputs start as NaN so
// that an element a kernel forgets to write fails. Backward kernels that must be reproducible are
// run twice and compared bit for bit.
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/timer.h"
#include "cuda_test_util.h"
#include "kernel_test_util.h"
#include "ops/backend.h"
#include "ops/cuda/attention_hopper.cuh"
#include "ops/profile.h"

namespace nanoddp {
namespace {

using testing::bytes_of;
using testing::kBf16Eps;
using testing::max_rel_error;
using testing::poisoned;
using testing::randint;
using testing::randn;
using testing::rel_l2;
using testing::rounded;
using testing::to_double;
using testing::to_gpu;
using testing::to_host;
using testing::tol;

// max_rel_error of a GPU result against a CPU one.
double err(const Tensor& got, const Tensor& want) { return max_rel_error(to_double(got), to_double(want)); }

class DTypes : public ::testing::TestWithParam<DType> {};
std::string dtype_name_of(const ::testing::TestParamInfo<DType>& info) { return testing::dtype_label(info.param); }

// ---- matmul --------------------------------------------------------------------------------------
struct MatmulCase {
  int64_t m, n, k;
  bool ta, tb;
  DType in, out;
};

class CudaMatmul : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(CudaMatmul, MatchesCpuWithAlphaBetaAndIgnoresOutputWhenBetaIsZero) {
  NANODDP_REQUIRE_GPU();
  auto [m, n, k, ta, tb, in, out] = GetParam();
  uint64_t seed = 100 + m * 7 + n * 3 + k;
  Tensor a = rounded(randn(ta ? Shape{k, m} : Shape{m, k}, seed), in);
  Tensor b = rounded(randn(tb ? Shape{n, k} : Shape{k, n}, seed + 1), in);
  Tensor c = rounded(randn({m, n}, seed + 2), out);
  Tensor ga = to_gpu(a, in), gb = to_gpu(b, in), gc = to_gpu(c, out);
  ops::matmul(gc, ga, ta, gb, tb, 0.5f, 2.0f);
  ops::matmul(c, a, ta, b, tb, 0.5f, 2.0f);
  // f32 accumulation of exact products; one rounding of a 16-bit output.
  EXPECT_LT(err(gc, c), tol(out, 2e-5, kBf16Eps)) << "alpha/beta";
  Tensor fresh = poisoned({m, n}, out);  // beta = 0: NaN in the output must not be read
  ops::matmul(fresh, ga, ta, gb, tb, 1.f, 0.f);
  ops::matmul(c, a, ta, b, tb, 1.f, 0.f);
  EXPECT_LT(err(fresh, c), tol(out, 2e-5, kBf16Eps)) << "beta 0";
}

std::vector<MatmulCase> matmul_cases() {
  std::vector<MatmulCase> cases;
  const MatmulCase shapes[] = {{1, 1, 1, false, false, {}, {}},   {7, 5, 3, false, true, {}, {}},
                               {33, 17, 65, true, false, {}, {}}, {64, 96, 40, true, true, {}, {}},
                               {130, 3, 257, false, false, {}, {}}, {256, 384, 512, false, true, {}, {}},
                               {384, 256, 512, true, false, {}, {}}};
  const std::pair<DType, DType> types[] = {
      {DType::F32, DType::F32}, {DType::BF16, DType::F32}, {DType::BF16, DType::BF16}, {DType::F32, DType::BF16},
      {DType::F16, DType::F32}, {DType::F16, DType::F16},  {DType::F32, DType::F16}};
  for (auto s : shapes)
    for (auto [in, out] : types) {
      s.in = in;
      s.out = out;
      cases.push_back(s);
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMatmul, ::testing::ValuesIn(matmul_cases()),
                         [](const ::testing::TestParamInfo<MatmulCase>& i) {
                           const auto& c = i.param;
                           return fmt::format("m{}n{}k{}{}{}_{}_{}", c.m, c.n, c.k, c.ta ? "T" : "N",
                                              c.tb ? "T" : "N", testing::dtype_label(c.in),
                                              testing::dtype_label(c.out));
                         });

// f32 operands into a bf16 output take the fallback kernel (cuBLASLt has no such type pair). Its
// grid.y holds at most 65,535 tiles of 32 rows, so an output taller than 2,097,120 rows needs a
// second launch: 37 rows past that, every element checked (the output starts as NaN).
TEST(CudaMatmul, FallbackKernelCoversOutputsTallerThanOneGrid) {
  NANODDP_REQUIRE_GPU();
  const int64_t m = 65535 * 32 + 37, n = 3, k = 5;
  Tensor a = randn({m, k}, 7), b = randn({k, n}, 8);
  Tensor got = poisoned({m, n}, DType::BF16);
  ops::matmul(got, to_gpu(a, DType::F32), false, to_gpu(b, DType::F32), false, 1.5f, 0.f);
  Tensor want = Tensor::empty({m, n}, DType::F32);  // the CPU takes f32 operands into f32 only
  ops::matmul(want, a, false, b, false, 1.5f, 0.f);
  EXPECT_LT(err(got, want), tol(DType::BF16, 2e-5, kBf16Eps));
}

// ---- elementwise ---------------------------------------------------------------------------------
TEST_P(DTypes, FillScaleAxpyRelu2) {
  NANODDP_REQUIRE_GPU();
  const DType dt = GetParam();
  for (int64_t offset : {0, 1}) {  // offset 1: views not aligned to 16 bytes (the scalar path)
    const int64_t n = 1000 + offset;
    Tensor x = rounded(randn({n}, 1), dt), y = rounded(randn({n}, 2), dt);
    Tensor gx = to_gpu(x, dt).region(offset, {n - offset}), gy = to_gpu(y, dt).region(offset, {n - offset});
    Tensor cx = x.region(offset, {n - offset}), cy = y.region(offset, {n - offset});
    ops::axpy(gy, gx, -0.75f);
    ops::axpy(cy, cx, -0.75f);
    EXPECT_LT(err(gy, cy), tol(dt, 1e-6, kBf16Eps)) << "axpy offset " << offset;
    ops::scale(gy, 3.f);
    ops::scale(cy, 3.f);
    EXPECT_LT(err(gy, cy), tol(dt, 1e-6, 2 * kBf16Eps)) << "scale";
    Tensor r = poisoned(gx.shape(), dt), cr = Tensor::empty(cx.shape(), DType::F32);
    ops::relu2_forward(r, gx);
    ops::relu2_forward(cr, cx);
    EXPECT_LT(err(r, cr), tol(dt, 1e-6, kBf16Eps)) << "relu2";
    ops::relu2_backward(gy, gy, gx);  // in place, as the model calls it
    ops::relu2_backward(cy, cy, cx);
    EXPECT_LT(err(gy, cy), tol(dt, 1e-6, 3 * kBf16Eps)) << "relu2 backward";
    ops::fill(gx, 0.3f);
    for (float v : testing::to_vector(gx)) ASSERT_EQ(v, testing::round_to(dt, 0.3f));
  }
}

TEST(CudaCast, RoundsToNearestEvenLikeTheCpu) {
  NANODDP_REQUIRE_GPU();
  const int64_t n = 4099;
  Tensor x = randn({n}, 3, 100.f);
  x.data<float>()[0] = 1.f + 1.f / 256;     // a bf16 tie: rounds to even (1.0)
  x.data<float>()[1] = 1.f + 3.f / 256;     // a bf16 tie: rounds to even (1 + 4/256)
  x.data<float>()[2] = 1.f + 1.f / 2048;    // an f16 tie: rounds to even (1.0)
  x.data<float>()[3] = 1.f + 3.f / 2048;    // an f16 tie: rounds to even (1 + 4/2048)
  x.data<float>()[4] = 70000.f;             // past f16's largest finite value (65504): inf
  x.data<float>()[5] = 3e-6f;               // an f16 subnormal
  x.data<float>()[6] = 1e-9f;               // below half of f16's smallest subnormal: 0
  Tensor gx = x.copy_to(testing::gpu());
  Tensor b = Tensor::empty({n}, DType::BF16, testing::gpu()), h = Tensor::empty({n}, DType::F16, testing::gpu());
  ops::cast(b, gx);
  ops::cast(h, gx);
  Tensor hb = b.copy_to(Device::cpu()), hh = h.copy_to(Device::cpu());
  for (int64_t i = 0; i < n; i++) {
    ASSERT_EQ(hb.data<bf16>()[i].bits, f32_to_bf16(x.data<float>()[i]).bits) << i;
    ASSERT_EQ(hh.data<f16>()[i].bits, f32_to_f16(x.data<float>()[i]).bits) << i;
  }
  for (DType dt : {DType::BF16, DType::F16}) {
    Tensor back = poisoned({n}, DType::F32);
    ops::cast(back, dt == DType::BF16 ? b : h);
    EXPECT_EQ(testing::to_vector(back), testing::to_vector(rounded(x, dt))) << testing::dtype_label(dt);
  }
  // Between the 16-bit types: through f32, one rounding (bf16 -> f16 overflows to inf where it must).
  Tensor hb2 = poisoned({n}, DType::F16);
  ops::cast(hb2, b);
  EXPECT_EQ(testing::to_vector(hb2), testing::to_vector(rounded(rounded(x, DType::BF16), DType::F16)));
}

// ---- embedding -----------------------------------------------------------------------------------
TEST_P(DTypes, EmbeddingForwardGathersAndBackwardMatchesAndRepeats) {
  NANODDP_REQUIRE_GPU();
  const DType dt = GetParam();
  // Few ids over many positions: long runs that cross the backward's 64-entry chunks, and one
  // slice boundary of 256 channels.
  const int64_t v = 11, c = 300, n = 700;
  Tensor table = rounded(randn({v, c}, 4), dt), ids = randint({n}, 5, 0, v);
  for (int64_t i = 200; i < 500; i++) ids.data<int32_t>()[i] = 3;  // one very frequent token
  Tensor gids = ids.copy_to(testing::gpu());
  Tensor out = poisoned({n, c}, dt), cout = Tensor::empty({n, c}, DType::F32);
  ops::embedding_forward(out, to_gpu(table, dt), gids);
  ops::embedding_forward(cout, table, ids);
  EXPECT_EQ(err(out, cout), 0.0);

  Tensor dout = rounded(randn({n, c}, 6), dt), dtable = randn({v, c}, 7);
  Tensor gdout = to_gpu(dout, dt);
  auto backward = [&] {
    Tensor g = to_gpu(dtable, DType::F32);
    ops::embedding_backward(g, gdout, gids);
    return g;
  };
  Tensor g1 = backward(), g2 = backward();
  ops::embedding_backward(dtable, dout, ids);
  EXPECT_LT(err(g1, dtable), 1e-5);  // f32 sums in another order
  EXPECT_EQ(bytes_of(g1), bytes_of(g2));
}

TEST(CudaEmbedding, OutOfRangeIdIsAnErrorAtTheNextSynchronisation) {
  NANODDP_REQUIRE_GPU();
  Tensor table = to_gpu(randn({4, 8}, 1), DType::F32);
  Tensor ids = Tensor::zeros({3}, DType::I32);
  ids.data<int32_t>()[2] = 4;
  Tensor out = Tensor::empty({3, 8}, DType::F32, testing::gpu());
  ops::embedding_forward(out, table, ids.copy_to(testing::gpu()));
  NANODDP_EXPECT_ERROR(ops::backend(testing::gpu()).synchronize(), "token id 4 at position 2");
  ops::backend(testing::gpu()).synchronize();  // reported once, then cleared
  // The backward, called directly, reports one too (as the CPU's refuses them), negative ids
  // included; the rows in range are still added.
  ids.data<int32_t>()[0] = -3;
  Tensor dtable = Tensor::zeros({4, 8}, DType::F32, testing::gpu());
  ops::embedding_backward(dtable, to_gpu(randn({3, 8}, 2), DType::F32), ids.copy_to(testing::gpu()));
  NANODDP_EXPECT_ERROR(ops::backend(testing::gpu()).synchronize(), "token id -3 at position 0 is outside [0, 4)");
  ops::backend(testing::gpu()).synchronize();
}

// ---- RMSNorm -------------------------------------------------------------------------------------
TEST_P(DTypes, RmsNormForwardAndBackward) {
  NANODDP_REQUIRE_GPU();
  const DType dt = GetParam();
  const float eps = 1.1920929e-07f;
  // Rows of 128 and 64 take 16 and 8 lanes in 16-bit types, 12 (element-wise) 16 lanes; 37 rows
  // leave groups past the last row in the last warp.
  for (int64_t c : {129, 128, 1280, 64, 12}) {
    const int64_t rows = 37;
    Tensor x = rounded(randn({rows, c}, 8, 3.f), dt);
    Tensor y = poisoned({rows, c}, dt), rstd = poisoned({rows}, DType::F32);
    Tensor cy = Tensor::empty({rows, c}, DType::F32), crstd = Tensor::empty({rows}, DType::F32);
    ops::rmsnorm_forward(y, rstd, to_gpu(x, dt), eps);
    ops::rmsnorm_forward(cy, crstd, x, eps);
    EXPECT_LT(err(y, cy), tol(dt, 2e-6, kBf16Eps)) << c;
    EXPECT_LT(err(rstd, crstd), 2e-6) << c;
    // Backward from the GPU's own y (as the model does), in place and accumulating.
    Tensor yh = to_host(y), dy = rounded(randn({rows, c}, 9), dt), dx0 = rounded(randn({rows, c}, 10), dt);
    Tensor gdy = to_gpu(dy, dt), gdx = to_gpu(dx0, dt);
    ops::rmsnorm_backward(gdx, gdy, y, rstd, true);
    ops::rmsnorm_backward(dx0, dy, yh, to_host(rstd), true);
    EXPECT_LT(err(gdx, dx0), tol(dt, 1e-5, 2 * kBf16Eps)) << "accumulate " << c;
    ops::rmsnorm_backward(gdy, gdy, y, rstd, false);
    ops::rmsnorm_backward(dy, dy, yh, to_host(rstd), false);
    EXPECT_LT(err(gdy, dy), tol(dt, 1e-5, kBf16Eps)) << "in place " << c;
  }
}

// ---- rotary --------------------------------------------------------------------------------------
TEST_P(DTypes, RotaryMatchesCpuInPlaceAndInverse) {
  NANODDP_REQUIRE_GPU();
  const DType dt = GetParam();
  // head_dim 128 takes the 16-byte path (pairs 8 at a time in bf16 and f16, 4 in f32), 12 the
  // element-wise one (6 pairs per half).
  for (const int64_t d : {int64_t{128}, int64_t{12}}) {
    const int64_t b = 2, t = 9, h = 3, pos0 = 5, rows = 32;
    Tensor cos = Tensor::empty({rows, d / 2}, DType::F32), sin = Tensor::empty({rows, d / 2}, DType::F32);
    for (int64_t p = 0; p < rows; p++)
      for (int64_t i = 0; i < d / 2; i++) {
        const float f = 1.f / std::pow(10000.f, 2.f * i / d);
        cos.data<float>()[p * d / 2 + i] = round_to_bf16(std::cos(p * f));
        sin.data<float>()[p * d / 2 + i] = round_to_bf16(std::sin(p * f));
      }
    Tensor gcos = cos.copy_to(testing::gpu()), gsin = sin.copy_to(testing::gpu());
    for (bool inverse : {false, true}) {
      Tensor x = rounded(randn({b, t, h, d}, 11), dt), gx = to_gpu(x, dt);
      ops::rotary(gx, gx, gcos, gsin, pos0, inverse);
      ops::rotary(x, x, cos, sin, pos0, inverse);
      EXPECT_LT(err(gx, x), tol(dt, 1e-6, kBf16Eps)) << "head_dim " << d << " inverse " << inverse;
    }
  }
}

// ---- attention -----------------------------------------------------------------------------------
struct AttnCase {
  int64_t b, tq, tcap, kv_len, hq, hkv, d;
  DType dt;
  int64_t window = 0;  // a sliding window (ops.h), 0 for full causal attention
};

class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

// Under NANODDP_CUDA_ATTENTION=hopper (ctest's cuda_attention_route_hopper) on a GPU that cannot run
// the Hopper kernels the backend refuses the route by design: the tests skip, saying why, instead
// of failing. Empty when the route of this run can run on GPU 0.
std::string attention_route_unavailable() {
  const char* route = std::getenv("NANODDP_CUDA_ATTENTION");
  if (route == nullptr || std::string(route) != "hopper") return "";
  const std::string why = cuda::hopper_attention_unavailable(0);
  return why.empty() ? "" : "skipped: NANODDP_CUDA_ATTENTION=hopper, and GPU 0 cannot run it: " + why;
}

#define REQUIRE_ATTENTION_ROUTE()                           \
  do {                                                      \
    NANODDP_REQUIRE_GPU();                                  \
    const std::string why = attention_route_unavailable();  \
    NANODDP_SKIP_UNLESS(why.empty(), why);                  \
  } while (0)

// 16-bit types: P is rounded to the type before P V (as every flash kernel does) and the output
// once. lse comes from f32 scores in every dtype; the flash kernels' base-2 exponentials set its
// bound.
TEST_P(CudaAttention, ForwardMatchesCpu) {
  REQUIRE_ATTENTION_ROUTE();
  auto [b, tq, tcap, kv_len, hq, hkv, d, dt, window] = GetParam();
  Tensor q = rounded(randn({b, tq, hq, d}, 20), dt), k = rounded(randn({b, tcap, hkv, d}, 21), dt),
         v = rounded(randn({b, tcap, hkv, d}, 22), dt);
  const float scale = 1.f / std::sqrt(float(d));
  Tensor out = poisoned(q.shape(), dt), lse = poisoned({b, hq, tq}, DType::F32);
  ops::attention_forward(out, lse, to_gpu(q, dt), to_gpu(k, dt), to_gpu(v, dt), kv_len, scale, window);
  Tensor cout = Tensor::empty(q.shape(), DType::F32), clse = Tensor::empty({b, hq, tq}, DType::F32);
  ops::attention_forward(cout, clse, q, k, v, kv_len, scale, window);
  EXPECT_LT(err(out, cout), tol(dt, 1e-5, 4 * kBf16Eps));
  EXPECT_LT(err(lse, clse), dt == DType::F32 ? 1e-5 : 1e-4);
}

TEST_P(CudaAttention, BackwardMatchesCpuAndIsReproducible) {
  REQUIRE_ATTENTION_ROUTE();
  auto [b, t, tcap, kv_len, hq, hkv, d, dt, window] = GetParam();
  if (t != tcap || t != kv_len) GTEST_SKIP() << "the backward is for training (Tq == Tk == kv_len)";
  Tensor q = rounded(randn({b, t, hq, d}, 30), dt), k = rounded(randn({b, t, hkv, d}, 31), dt),
         v = rounded(randn({b, t, hkv, d}, 32), dt), dout = rounded(randn({b, t, hq, d}, 33), dt);
  const float scale = 1.f / std::sqrt(float(d));
  Tensor gq = to_gpu(q, dt), gk = to_gpu(k, dt), gv = to_gpu(v, dt), gdout = to_gpu(dout, dt);
  Tensor out = Tensor::empty(q.shape(), dt, testing::gpu()), lse = Tensor::empty({b, hq, t}, DType::F32, testing::gpu());
  ops::attention_forward(out, lse, gq, gk, gv, t, scale, window);
  auto backward = [&] {
    std::vector<Tensor> g{poisoned(q.shape(), dt), poisoned(k.shape(), dt), poisoned(v.shape(), dt)};
    ops::attention_backward(g[0], g[1], g[2], gdout, gq, gk, gv, out, lse, scale, window);
    return g;
  };
  auto g1 = backward(), g2 = backward();
  // The CPU backward from the GPU's forward (out, lse), so only the backward is compared.
  Tensor dq = Tensor::empty(q.shape(), DType::F32), dk = Tensor::empty(k.shape(), DType::F32),
         dv = Tensor::empty(v.shape(), DType::F32);
  ops::attention_backward(dq, dk, dv, dout, q, k, v, to_host(out), to_host(lse), scale, window);
  // 16-bit types: P and dS are rounded to the type before their GEMMs, and the results once.
  // With one key, P = 1 and O = V, so dS = P (dO.V - dO.O) is 0 in exact arithmetic and dq, dk are
  // what is left of that cancellation on either side: they are measured against the size of the
  // terms that cancel (scale |dO| |V| |K|), not against the near-zero CPU values (an H200 gave
  // 0.12 relative to those in f16 with every other shape passing).
  double floor = 1e-12;
  if (t == 1) {
    auto max_abs = [](const Tensor& x) {
      double m = 0;
      for (double e : to_double(x)) m = std::max(m, std::abs(e));
      return m;
    };
    floor = scale * double(d) * max_abs(dout) * max_abs(v) * max_abs(k);
  }
  EXPECT_LT(max_rel_error(g1[0], dq, floor), tol(dt, 1e-5, 8 * kBf16Eps)) << "dq";
  EXPECT_LT(max_rel_error(g1[1], dk, floor), tol(dt, 1e-5, 8 * kBf16Eps)) << "dk";
  EXPECT_LT(err(g1[2], dv), tol(dt, 1e-5, 8 * kBf16Eps)) << "dv";
  if (t > 1) {
    EXPECT_LT(rel_l2(to_double(g1[0]), to_double(dq)), tol(dt, 1e-5, 2 * kBf16Eps)) << "dq";
  }
  // Every route but cuDNN's nondeterministic one (its dQ is summed with atomic adds) repeats bit for bit.
  const char* route = std::getenv("NANODDP_CUDA_ATTENTION");
  if (route == nullptr || std::string(route) != "cudnn_nondeterministic") {
    for (int i = 0; i < 3; i++) EXPECT_EQ(bytes_of(g1[i]), bytes_of(g2[i])) << "run-to-run, gradient " << i;
  }
}

std::vector<AttnCase> attention_cases() {
  const AttnCase shapes[] = {
      {1, 1, 1, 1, 1, 1, 8, {}},            // a single token
      {2, 13, 13, 13, 4, 4, 16, {}},        // multi-head, reference kernels
      {2, 17, 17, 17, 6, 2, 8, {}},         // grouped-query (3 query heads per kv head)
      {1, 200, 200, 200, 2, 1, 32, {}},     // many rows
      {2, 3, 20, 11, 4, 2, 16, {}},         // decoding: 3 new queries after 8 cached
      {1, 1, 64, 40, 2, 2, 128, {}},        // one new token, head_dim 128 (flash in bf16 and f16)
      {1, 70, 100, 90, 2, 1, 128, {}},      // cache offset 20: diagonal not on a tile boundary
      {2, 130, 130, 130, 4, 2, 128, {}},    // flash: partial tiles, grouped-query
      {1, 256, 256, 256, 2, 2, 64, {}},     // flash, head_dim 64, whole tiles
      {1, 64, 64, 64, 1, 1, 128, {}},       // one tile exactly
      {2, 130, 130, 130, 4, 2, 96, {}},     // flash at width 96, exactly (depth 3's head_dim)
      {1, 70, 100, 90, 2, 1, 120, {}},      // flash at width 128 with 8 zero columns (depth 15)
      {2, 65, 65, 65, 2, 2, 112, {}},       // width 128 with 16 zero columns (depth 7)
      {1, 3, 70, 70, 2, 1, 80, {}},         // width 96 with 16 zero columns, decoding after a cache
      // Sliding windows (the CPU kernels, compared with, are checked against the masked reference):
      // whole key tiles skipped and rows that meet a tile before any key of theirs (37, 1), a band
      // that starts mid-tile after a cache offset (20), one decoded token (7), f32 and head_dim 32 on
      // the reference kernels, and nanochat's short window at T = 1024 (ceil(1024 / 4 / 128) * 128).
      {1, 300, 300, 300, 2, 1, 64, {}, 37},
      {2, 130, 130, 130, 4, 2, 128, {}, 1},
      {1, 70, 100, 90, 2, 1, 128, {}, 20},
      {1, 1, 64, 40, 2, 2, 128, {}, 7},
      {1, 200, 200, 200, 2, 1, 32, {}, 50},
      {2, 130, 130, 130, 4, 2, 96, {}, 100},
      {1, 1024, 1024, 1024, 2, 2, 128, {}, 256},
  };
  std::vector<AttnCase> cases;
  for (auto s : shapes)
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      s.dt = dt;
      cases.push_back(s);
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention, ::testing::ValuesIn(attention_cases()),
                         [](const ::testing::TestParamInfo<AttnCase>& i) {
                           const auto& c = i.param;
                           return fmt::format("b{}q{}cap{}kv{}h{}g{}d{}{}_{}", c.b, c.tq, c.tcap, c.kv_len, c.hq,
                                              c.hkv, c.d, c.window > 0 ? fmt::format("w{}", c.window) : "",
                                              testing::dtype_label(c.dt));
                         });

// The reference kernels (f32 here) keep a row of scores or probabilities per block in shared
// memory: the forward one of kv_len floats, the backward ones of Tq. Over the GPU's per-block limit
// (227 KiB on Hopper) that is one clear error before any launch, and the backend stays usable.
TEST(CudaAttention, ReferenceKernelsSayWhenTheSequenceNeedsMoreSharedMemoryThanTheGpuHas) {
  REQUIRE_ATTENTION_ROUTE();
  const int64_t t = 70000, d = 8;  // 273 KiB of f32 scores a block
  const float scale = 1.f / std::sqrt(float(d));
  Tensor q = to_gpu(randn({1, t, 1, d}, 40), DType::F32), k = to_gpu(randn({1, t, 1, d}, 41), DType::F32),
         v = to_gpu(randn({1, t, 1, d}, 42), DType::F32);
  Tensor out = poisoned({1, t, 1, d}, DType::F32), lse = poisoned({1, 1, t}, DType::F32);
  NANODDP_EXPECT_ERROR(ops::attention_forward(out, lse, q, k, v, t, scale, 0),
                       "attention over 70000 keys with head_dim 8 on the reference CUDA kernels");
  Tensor dq = poisoned(q.shape(), DType::F32), dk = poisoned(k.shape(), DType::F32),
         dv = poisoned(v.shape(), DType::F32);
  NANODDP_EXPECT_ERROR(ops::attention_backward(dq, dk, dv, q, q, k, v, q, lse, scale, 0), "KiB of shared memory");
  // A sequence that fits still runs, on the same backend.
  const int64_t s = 300;
  Tensor sq = randn({1, s, 1, d}, 43), sk = randn({1, s, 1, d}, 44), sv = randn({1, s, 1, d}, 45);
  Tensor sout = poisoned({1, s, 1, d}, DType::F32), slse = poisoned({1, 1, s}, DType::F32);
  ops::attention_forward(sout, slse, to_gpu(sq, DType::F32), to_gpu(sk, DType::F32), to_gpu(sv, DType::F32), s,
                         scale, 0);
  Tensor cout = Tensor::empty({1, s, 1, d}, DType::F32), clse = Tensor::empty({1, 1, s}, DType::F32);
  ops::attention_forward(cout, clse, sq, sk, sv, s, scale, 0);
  EXPECT_LT(err(sout, cout), 1e-5);
}

// ---- soft-capped cross-entropy -------------------------------------------------------------------
TEST_P(DTypes, SoftcapCrossEntropyLossesAndGradientsInPlace) {
  NANODDP_REQUIRE_GPU();
  const DType dt = GetParam();
  struct Case {
    int64_t n, vpad, vocab;
  };
  for (auto [n, vpad, vocab] : {Case{19, 128, 100}, Case{4, 65536, 65530}, Case{5, 70, 67}}) {
    Tensor logits = rounded(randn({n, vpad}, 14, 20.f), dt);  // large logits: the cap matters
    Tensor targets = randint({n}, 15, 0, static_cast<int32_t>(vocab));
    targets.data<int32_t>()[1] = -1;
    Tensor gt = targets.copy_to(testing::gpu());
    // Evaluation: losses only, logits untouched.
    Tensor gl = to_gpu(logits, dt), losses = poisoned({n}, DType::F32), closs = Tensor::empty({n}, DType::F32);
    ops::softcap_cross_entropy(losses, gl, gt, vocab, 15.f, 0.f);
    Tensor cl = logits.copy_to(Device::cpu());
    ops::softcap_cross_entropy(closs, cl, targets, vocab, 15.f, 0.f);
    EXPECT_LT(err(losses, closs), 1e-5) << vpad;
    EXPECT_EQ(bytes_of(gl), bytes_of(to_gpu(logits, dt)));
    // Training: dlogits over the logits, zero in the padding and the ignored row.
    ops::softcap_cross_entropy(losses, gl, gt, vocab, 15.f, 0.37f);
    ops::softcap_cross_entropy(closs, cl, targets, vocab, 15.f, 0.37f);
    EXPECT_LT(err(losses, closs), 1e-5) << vpad;
    EXPECT_LT(err(gl, cl), tol(dt, 1e-5, kBf16Eps)) << vpad;
    auto g = testing::to_vector(gl);
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = vocab; j < vpad; j++) ASSERT_EQ(g[i * vpad + j], 0.f);
    for (int64_t j = 0; j < vpad; j++) ASSERT_EQ(g[1 * vpad + j], 0.f);
  }
}

TEST(CudaCrossEntropy, TargetOutsideTheVocabularyIsAnError) {
  NANODDP_REQUIRE_GPU();
  Tensor logits = to_gpu(randn({2, 64}, 1), DType::F32);
  Tensor targets = Tensor::zeros({2}, DType::I32);
  targets.data<int32_t>()[1] = 50;
  Tensor losses = Tensor::empty({2}, DType::F32, testing::gpu());
  ops::softcap_cross_entropy(losses, logits, targets.copy_to(testing::gpu()), 50, 15.f, 1.f);
  EXPECT_THROW(ops::backend(testing::gpu()).synchronize(), Error);
}

// ---- optimizer -----------------------------------------------------------------------------------
TEST(CudaOptimizer, AdamWMatchesCpuOverStepsOnAlignedAndOffsetViews) {
  NANODDP_REQUIRE_GPU();
  for (int64_t offset : {0, 1}) {
    const int64_t n = 1001;
    Tensor p = randn({n}, 1), m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
    Tensor gp = p.copy_to(testing::gpu()), gm = m.copy_to(testing::gpu()), gv = v.copy_to(testing::gpu());
    const int64_t len = n - offset;
    ops::AdamWStep s{.lr = 0.01f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-10f, .weight_decay = 0.1f};
    for (int step = 1; step <= 3; step++) {
      Tensor g = randn({n}, 10 + step);
      s.step = step;
      ops::adamw_update(gp.region(offset, {len}), g.copy_to(testing::gpu()).region(offset, {len}),
                        gm.region(offset, {len}), gv.region(offset, {len}), s);
      ops::adamw_update(p.region(offset, {len}), g.region(offset, {len}), m.region(offset, {len}),
                        v.region(offset, {len}), s);
    }
    EXPECT_LT(err(gp, p), 1e-6) << offset;
    EXPECT_LT(err(gm, m), 1e-6) << offset;
    EXPECT_LT(err(gv, v), 1e-6) << offset;
  }
}

TEST(CudaOptimizer, MuonMomentumMatchesCpu) {
  NANODDP_REQUIRE_GPU();
  for (float mom : {0.85f, 0.3f}) {  // both sides of torch.lerp's switch at weight 0.5
    const int64_t n = 1027;
    Tensor g = randn({n}, 2), buf = randn({n}, 3);
    Tensor gg = g.copy_to(testing::gpu()), gb = buf.copy_to(testing::gpu());
    ops::muon_momentum(gg, gb, mom);
    ops::muon_momentum(g, buf, mom);
    EXPECT_LT(err(gg, g), 1e-6) << mom;
    EXPECT_LT(err(gb, buf), 1e-6) << mom;
  }
}

class CudaNewtonSchulz : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(CudaNewtonSchulz, MatchesCpuInBothModesAndIsReproducible) {
  NANODDP_REQUIRE_GPU();
  auto [rows, cols] = GetParam();
  Tensor x = randn({rows, cols}, 4);
  for (bool bf16 : {false, true}) {
    Tensor c = x.copy_to(Device::cpu()), g1 = x.copy_to(testing::gpu()), g2 = x.copy_to(testing::gpu());
    ops::newton_schulz(c, 5, bf16);
    ops::newton_schulz(g1, 5, bf16);
    ops::newton_schulz(g2, 5, bf16);
    EXPECT_EQ(bytes_of(g1), bytes_of(g2)) << "run-to-run, bf16 " << bf16;
    if (bf16) {
      // Same rounding steps; only the GEMMs' f32 summation order differs, which flips the bf16
      // rounding of a few elements per GEMM and five iterations amplify (PyTorch's own bf16
      // Newton-Schulz is 5-12% from exact arithmetic, tests/ops/test_optimizer_kernels.cpp).
      EXPECT_LT(err(g1, c), 0.15);
      EXPECT_LT(rel_l2(to_double(g1), to_double(c)), 0.05);
    } else {
      EXPECT_LT(err(g1, c), 1e-3);
    }
  }
}

// Bounds of a batched orthogonalisation against the CPU kernel on each matrix alone: bf16's largest
// relative error and relative Frobenius distance, and f32's largest relative error (each caller
// says why).
struct BatchBounds {
  double bf16_max, bf16_l2, f32_max;
};

// 37 matrices of one shape, more than one batch holds (cuda::kNsMaxBatch, 32), so a full batch and
// a partial one, with different norms (every seventh scaled by 25), in both modes: the batch run
// twice agrees bit for bit, and each matrix is within `bounds` of the CPU kernel on it alone.
// `ortho(x, steps, bf16)` takes one matrix or a list of them.
template <typename Ortho>
void expect_batch_matches_cpu(Ortho ortho, int64_t rows, int64_t cols, uint64_t seed, BatchBounds bounds) {
  const int count = 37;
  for (bool bf16 : {false, true}) {
    std::vector<Tensor> cpu, g1, g2;
    for (int i = 0; i < count; i++) {
      Tensor x = randn({rows, cols}, seed + static_cast<uint64_t>(i));
      if (i % 7 == 3) ops::scale(x, 25.f);
      cpu.push_back(x.copy_to(Device::cpu()));
      g1.push_back(x.copy_to(testing::gpu()));
      g2.push_back(x.copy_to(testing::gpu()));
    }
    ortho(g1, 5, bf16);
    ortho(g2, 5, bf16);
    for (int i = 0; i < count; i++) {
      ortho(cpu[i], 5, bf16);
      EXPECT_EQ(bytes_of(g1[i]), bytes_of(g2[i])) << "run-to-run, matrix " << i << ", bf16 " << bf16;
      if (bf16) {
        EXPECT_LT(err(g1[i], cpu[i]), bounds.bf16_max) << "matrix " << i;
        EXPECT_LT(rel_l2(to_double(g1[i]), to_double(cpu[i])), bounds.bf16_l2) << "matrix " << i;
      } else {
        EXPECT_LT(err(g1[i], cpu[i]), bounds.f32_max) << "matrix " << i;
      }
    }
  }
}

// Many matrices of one shape at once, as Muon passes them: 37 of them, more than one batch holds
// (cuda::kNsMaxBatch, 32), so a full batch and a partial one. Each against the CPU on its own, with
// the single-matrix test's tolerances, and the batch reproducible bit for bit.
TEST_P(CudaNewtonSchulz, ManyMatricesAtOnceMatchTheCpuEachOnItsOwn) {
  NANODDP_REQUIRE_GPU();
  auto [rows, cols] = GetParam();
  expect_batch_matches_cpu([](const auto& x, int steps, bool bf16) { ops::newton_schulz(x, steps, bf16); }, rows, cols,
                           60, {0.15, 0.05, 1e-3});
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaNewtonSchulz,
                         ::testing::Values(std::pair<int64_t, int64_t>{32, 32}, std::pair<int64_t, int64_t>{16, 48},
                                           std::pair<int64_t, int64_t>{64, 24},
                                           std::pair<int64_t, int64_t>{256, 768},
                                           std::pair<int64_t, int64_t>{768, 256}));

// ---- nanochat's 2026 Muon: Polar Express and NorMuon against the CPU kernels -------------------

class CudaPolarExpress : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

// 37 matrices of one shape (a full batch of 32 and a partial one), different norms, each against
// the CPU kernel on its own, and the batch reproducible bit for bit. f32: 1e-3 as Newton-Schulz's
// f32 above (GEMM summation orders differ; the CPU kernel is 5e-6 from exact arithmetic).
// bf16: two bf16 runs of the same arithmetic whose GEMMs sum in different orders, each a few
// percent from exact (the CPU's: 6-8% of the largest entry, 5-7% in the Frobenius norm), so their
// distance is at most about the sum: 0.25 and 0.2, the CPU test's bounds against exact arithmetic.
TEST_P(CudaPolarExpress, ManyMatricesAtOnceMatchTheCpuEachOnItsOwn) {
  NANODDP_REQUIRE_GPU();
  auto [rows, cols] = GetParam();
  expect_batch_matches_cpu([](const auto& x, int steps, bool bf16) { ops::polar_express(x, steps, bf16); }, rows, cols,
                           90, {0.25, 0.2, 1e-3});
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaPolarExpress,
                         ::testing::Values(std::pair<int64_t, int64_t>{32, 32}, std::pair<int64_t, int64_t>{16, 48},
                                           std::pair<int64_t, int64_t>{64, 24},
                                           std::pair<int64_t, int64_t>{256, 768},
                                           std::pair<int64_t, int64_t>{768, 256}));

// Three steps of NorMuon on the GPU and the CPU from the same state: p and the second moment v
// within 1e-5 of the largest entry (both compute in f32 with double sums, in different orders, and
// the CPU may contract a multiply-add; a few f32 roundings of values of order 1), and the GPU's
// result the same bits run to run. Tall (per-row moment), square, and wide (per-column).
TEST(CudaNorMuon, ThreeStepsMatchTheCpuAndAreReproducible) {
  NANODDP_REQUIRE_GPU();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{768, 256}, {64, 64}, {96, 1000}}) {
    const int64_t k = rows >= cols ? rows : cols;
    Tensor p = randn({rows, cols}, 80), v = Tensor::zeros({k}, DType::F32);
    Tensor gp = p.copy_to(testing::gpu()), gv = v.copy_to(testing::gpu());
    Tensor gp2 = p.copy_to(testing::gpu()), gv2 = v.copy_to(testing::gpu());
    for (uint64_t step = 0; step < 3; step++) {
      Tensor g = randn({rows, cols}, 81 + step), gg = g.copy_to(testing::gpu());
      ops::normuon_update(p, g, v, 0.02f, 0.2f, 0.9f);
      ops::normuon_update(gp, gg, gv, 0.02f, 0.2f, 0.9f);
      ops::normuon_update(gp2, gg, gv2, 0.02f, 0.2f, 0.9f);
    }
    EXPECT_LT(err(gp, p), 1e-5) << rows << "x" << cols;
    EXPECT_LT(err(gv, v), 1e-5) << rows << "x" << cols;
    EXPECT_EQ(bytes_of(gp), bytes_of(gp2)) << rows << "x" << cols;
    EXPECT_EQ(bytes_of(gv), bytes_of(gv2)) << rows << "x" << cols;
  }
}

// ---- the op profiler's device timing (ops/profile.h) ---------------------------------------------
// An op's time is the device time between CUDA events around it: a large GEMM's is close to the
// host's wall time around it with synchronisations on both sides (it dominates that interval), and
// never above it. Enough small ops to pass the profiler's read-back threshold (16,384 pending ops)
// are all counted, each with a positive time.
TEST(CudaOpProfile, TimesDeviceWorkBetweenEvents) {
  NANODDP_REQUIRE_GPU();
  const int64_t n = 4096;
  Tensor a = to_gpu(randn({n, n}, 7), DType::BF16), c = Tensor::empty({n, n}, DType::BF16, testing::gpu());
  ops::Backend& be = ops::backend(testing::gpu());
  ops::matmul(c, a, false, a, true);  // warm-up: cuBLASLt's plan and workspace
  be.synchronize();
  ops::reset_profile();
  ops::set_profiling(true);
  Stopwatch sw;
  for (int i = 0; i < 4; i++) ops::matmul(c, a, false, a, true);
  be.synchronize();
  const double wall = sw.seconds();
  Tensor x = Tensor::zeros({1024}, DType::F32, testing::gpu());
  const int small = 20000;
  for (int i = 0; i < small; i++) ops::scale(x, 1.f);
  ops::set_profiling(false);
  auto stats = ops::profile_snapshot();
  EXPECT_EQ(stats["matmul"].calls, 4);
  EXPECT_GT(stats["matmul"].seconds, 0.5 * wall) << "the GEMMs are most of the interval; wall " << wall;
  EXPECT_LE(stats["matmul"].seconds, wall) << "device time between the events cannot exceed the host's";
  EXPECT_EQ(stats["scale"].calls, small);
  EXPECT_GT(stats["scale"].seconds, 0);
  ops::reset_profile();
}

INSTANTIATE_TEST_SUITE_P(ActDTypes, DTypes, ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_name_of);

}  // namespace
}  // namespace nanoddp
