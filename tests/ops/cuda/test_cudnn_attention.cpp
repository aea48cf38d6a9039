// cuDNN's fused attention on a GPU (ops/cuda/cudnn_attention.h), called directly, against the CPU
// backend's attention on the values the GPU tensors hold: forward and backward over several shapes,
// both backward variants, the plan cache and the kept workspace. Tolerances are those of the flash
// kernels' tests (test_cuda_ops.cpp), for the same reason: P and dS are rounded to the 16-bit type
// before their products and every result once, with f32 accumulation.
//
// The fallback tests run only under the environment their ctest entries set (tests/ops/cuda/
// CMakeLists.txt): a cuDNN that cannot be found, under the auto route and under the cudnn route.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/cuda_util.h"
#include "cuda_test_util.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/cudnn_library.h"

namespace nanoddp {
namespace {

using testing::bytes_of;
using testing::kBf16Eps;
using testing::max_rel_error;
using testing::poisoned;
using testing::randn;
using testing::rel_l2;
using testing::rounded;
using testing::to_double;
using testing::to_gpu;
using testing::to_host;
using testing::tol;

double err(const Tensor& got, const Tensor& want) { return max_rel_error(to_double(got), to_double(want)); }

#define REQUIRE_GPU_AND_CUDNN()                                                                       \
  do {                                                                                              \
    NANODDP_REQUIRE_GPU();                                                                          \
    NANODDP_SKIP_UNLESS(cuda::cudnn_library().loaded, "skipped: " + cuda::cudnn_library().why_not); \
  } while (0)

struct Case {
  int64_t b, t, tcap, hq, hkv, d;
  DType dt;
};

cuda::AttentionShape shape_of(const Case& c) { return {c.b, c.t, c.tcap, c.hq, c.hkv, c.d, c.t}; }

cudaStream_t stream() { return cuda::compute_stream(0); }

// Forward on cuDNN and on the CPU from the same rounded inputs.
void check_forward(cuda::CudnnAttention& dnn, const Case& c) {
  Tensor q = rounded(randn({c.b, c.t, c.hq, c.d}, 50), c.dt), k = rounded(randn({c.b, c.tcap, c.hkv, c.d}, 51), c.dt),
         v = rounded(randn({c.b, c.tcap, c.hkv, c.d}, 52), c.dt);
  const float scale = 1.f / std::sqrt(float(c.d));
  Tensor gq = to_gpu(q, c.dt), gk = to_gpu(k, c.dt), gv = to_gpu(v, c.dt);
  Tensor out = poisoned(q.shape(), c.dt), lse = poisoned({c.b, c.hq, c.t}, DType::F32);
  std::string why;
  ASSERT_TRUE(dnn.forward(c.dt, out.raw(), lse.data<float>(), gq.raw(), gk.raw(), gv.raw(), shape_of(c), scale,
                          stream(), why))
      << why;
  Tensor cout = Tensor::empty(q.shape(), DType::F32), clse = Tensor::empty({c.b, c.hq, c.t}, DType::F32);
  ops::attention_forward(cout, clse, q, k, v, c.t, scale, 0);
  EXPECT_LT(err(out, cout), tol(c.dt, 0, 4 * kBf16Eps)) << "out";
  EXPECT_LT(err(lse, clse), 1e-4) << "lse";  // from f32 scores, as the flash kernels' bound
}

// Backward on cuDNN (twice) against the CPU's from the GPU forward's out and lse; returns the
// gradients of both runs.
std::vector<std::vector<uint8_t>> check_backward(cuda::CudnnAttention& dnn, const Case& c) {
  Tensor q = rounded(randn({c.b, c.t, c.hq, c.d}, 60), c.dt), k = rounded(randn({c.b, c.t, c.hkv, c.d}, 61), c.dt),
         v = rounded(randn({c.b, c.t, c.hkv, c.d}, 62), c.dt), dout = rounded(randn({c.b, c.t, c.hq, c.d}, 63), c.dt);
  const float scale = 1.f / std::sqrt(float(c.d));
  Tensor gq = to_gpu(q, c.dt), gk = to_gpu(k, c.dt), gv = to_gpu(v, c.dt), gdout = to_gpu(dout, c.dt);
  Tensor out = Tensor::empty(q.shape(), c.dt, testing::gpu());
  Tensor lse = Tensor::empty({c.b, c.hq, c.t}, DType::F32, testing::gpu());
  ops::attention_forward(out, lse, gq, gk, gv, c.t, scale, 0);
  std::vector<std::vector<uint8_t>> runs;
  std::vector<Tensor> g;
  for (int run = 0; run < 2; run++) {
    g = {poisoned(q.shape(), c.dt), poisoned(k.shape(), c.dt), poisoned(v.shape(), c.dt)};
    std::string why;
    EXPECT_TRUE(dnn.backward(c.dt, g[0].raw(), g[1].raw(), g[2].raw(), gdout.raw(), gq.raw(), gk.raw(), gv.raw(),
                             out.raw(), lse.data<float>(), shape_of(c), scale, stream(), why))
        << why;
    std::vector<uint8_t> all;
    for (auto& x : g) {
      auto b = bytes_of(x);
      all.insert(all.end(), b.begin(), b.end());
    }
    runs.push_back(std::move(all));
  }
  Tensor dq = Tensor::empty(q.shape(), DType::F32), dk = Tensor::empty(k.shape(), DType::F32),
         dv = Tensor::empty(v.shape(), DType::F32);
  ops::attention_backward(dq, dk, dv, dout, q, k, v, to_host(out), to_host(lse), scale, 0);
  EXPECT_LT(max_rel_error(g[0], dq, 1e-12), tol(c.dt, 0, 8 * kBf16Eps)) << "dq";
  EXPECT_LT(max_rel_error(g[1], dk, 1e-12), tol(c.dt, 0, 8 * kBf16Eps)) << "dk";
  EXPECT_LT(err(g[2], dv), tol(c.dt, 0, 8 * kBf16Eps)) << "dv";
  EXPECT_LT(rel_l2(to_double(g[0]), to_double(dq)), tol(c.dt, 0, 2 * kBf16Eps)) << "dq";
  return runs;
}

std::vector<Case> cases() {
  const Case shapes[] = {
      {2, 17, 17, 6, 2, 64, {}},       // grouped-query (3 query heads per kv head), odd length
      {1, 200, 200, 2, 1, 32, {}},     // many rows, head_dim 32
      {2, 130, 130, 4, 2, 128, {}},    // partial tiles, grouped-query
      {1, 256, 256, 2, 2, 64, {}},     // whole tiles
      {2, 130, 130, 4, 4, 96, {}},     // head_dim 96 (depth 3)
      {2, 65, 65, 2, 2, 112, {}},      // head_dim 112 (depth 7)
  };
  std::vector<Case> out;
  for (auto c : shapes)
    for (DType dt : {DType::BF16, DType::F16}) {
      c.dt = dt;
      out.push_back(c);
    }
  return out;
}

std::string name_of(const Case& c) {
  return "b" + std::to_string(c.b) + "t" + std::to_string(c.t) + "h" + std::to_string(c.hq) + "g" +
         std::to_string(c.hkv) + "d" + std::to_string(c.d) + "_" + testing::dtype_label(c.dt);
}

TEST(CudnnAttentionGpu, ForwardMatchesCpu) {
  REQUIRE_GPU_AND_CUDNN();
  cuda::CudnnAttention dnn(0, true);
  for (const auto& c : cases()) {
    SCOPED_TRACE(name_of(c));
    check_forward(dnn, c);
  }
  // A prompt into a longer cache: K and V rows strided by the cache's capacity.
  check_forward(dnn, {2, 40, 64, 4, 2, 64, DType::BF16});
}

TEST(CudnnAttentionGpu, DeterministicBackwardMatchesCpuAndRepeatsBitForBit) {
  REQUIRE_GPU_AND_CUDNN();
  cuda::CudnnAttention dnn(0, true);
  for (const auto& c : cases()) {
    SCOPED_TRACE(name_of(c));
    auto runs = check_backward(dnn, c);
    EXPECT_TRUE(runs[0] == runs[1]) << "two runs of the deterministic backward differ";
  }
}

// PyTorch's backward (dQ summed with atomic adds): the same values, bits free to differ.
TEST(CudnnAttentionGpu, NondeterministicBackwardMatchesCpu) {
  REQUIRE_GPU_AND_CUDNN();
  cuda::CudnnAttention dnn(0, false);
  for (const auto& c : cases()) {
    SCOPED_TRACE(name_of(c));
    check_backward(dnn, c);
  }
}

// One plan per shape and direction, built once; the workspace grows to the largest and is kept.
TEST(CudnnAttentionGpu, PlansAreCachedAndTheWorkspaceKept) {
  REQUIRE_GPU_AND_CUDNN();
  cuda::CudnnAttention dnn(0, true);
  const Case big{2, 130, 130, 4, 2, 128, DType::BF16}, small{1, 17, 17, 2, 2, 64, DType::BF16};
  check_forward(dnn, big);
  check_forward(dnn, big);
  EXPECT_EQ(dnn.plans(), 1);
  check_backward(dnn, big);
  EXPECT_EQ(dnn.plans(), 2);
  const size_t held = dnn.workspace_bytes();
  EXPECT_GT(held, 0u);  // at least delta, f32 [B, H, T]
  check_backward(dnn, big);
  check_backward(dnn, small);
  EXPECT_EQ(dnn.plans(), 3);
  EXPECT_EQ(dnn.workspace_bytes(), held) << "the smaller shape reuses the workspace";
  EXPECT_NE(dnn.last_engine(), "");
  // For the log of a GPU run: which engine cuDNN chose and what it holds.
  fmt::print("cuDNN {} ({}): last plan on {}, workspace {} bytes\n", cuda::cudnn_library().version_string(),
             cuda::cudnn_library().path, dnn.last_engine(), held);
}

// ---- without cuDNN (ctest entries cuda_attention_without_cudnn_*) ------------------------------

bool cudnn_path_missing() {
  const char* p = std::getenv("NANODDP_CUDNN_PATH");
  return p != nullptr && !cuda::cudnn_library().loaded;
}

bool route_is(const char* want) {
  const char* r = std::getenv("NANODDP_CUDA_ATTENTION");
  return std::strcmp(r ? r : "auto", want) == 0;
}

// Under auto, a machine without cuDNN trains on our flash kernels: same results as the CPU.
TEST(CudnnFallback, AutoRunsTheFlashKernelsWithoutCudnn) {
  NANODDP_REQUIRE_GPU();
  NANODDP_SKIP_UNLESS(cudnn_path_missing() && route_is("auto"), "skipped: needs NANODDP_CUDNN_PATH=<missing>");
  const int64_t b = 2, t = 130, h = 4, d = 128;
  const DType dt = DType::BF16;
  Tensor q = rounded(randn({b, t, h, d}, 70), dt), k = rounded(randn({b, t, h, d}, 71), dt),
         v = rounded(randn({b, t, h, d}, 72), dt);
  const float scale = 1.f / std::sqrt(float(d));
  Tensor out = poisoned(q.shape(), dt), lse = poisoned({b, h, t}, DType::F32);
  ops::attention_forward(out, lse, to_gpu(q, dt), to_gpu(k, dt), to_gpu(v, dt), t, scale, 0);
  Tensor cout = Tensor::empty(q.shape(), DType::F32), clse = Tensor::empty({b, h, t}, DType::F32);
  ops::attention_forward(cout, clse, q, k, v, t, scale, 0);
  EXPECT_LT(err(out, cout), 4 * kBf16Eps);
}

// Under the cudnn route, a missing cuDNN is one clear error, not a quiet switch to other kernels.
TEST(CudnnFallback, CudnnRouteSaysCudnnIsMissing) {
  NANODDP_REQUIRE_GPU();
  NANODDP_SKIP_UNLESS(cudnn_path_missing() && route_is("cudnn"), "skipped: needs NANODDP_CUDNN_PATH=<missing>");
  const int64_t b = 1, t = 64, h = 2, d = 64;
  Tensor q = to_gpu(randn({b, t, h, d}, 73), DType::BF16);
  Tensor out = poisoned(q.shape(), DType::BF16), lse = poisoned({b, h, t}, DType::F32);
  NANODDP_EXPECT_ERROR(ops::attention_forward(out, lse, q, q, q, t, 0.125f, 0),
                       "NANODDP_CUDA_ATTENTION=cudnn on cuda:0, but cuDNN 9 not found",
                       std::getenv("NANODDP_CUDNN_PATH"), "unset it (auto)");
}

}  // namespace
}  // namespace nanoddp
