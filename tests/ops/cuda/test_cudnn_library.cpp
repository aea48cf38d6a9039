// cuDNN's loader, the attention route switch and the cuDNN attention graphs, without a GPU: where
// the loader looks, what it says for each place that fails, and that every operation of the
// forward and backward graphs passes cuDNN's own checks (on a machine whose cuDNN 9 loads; the
// engines and the numbers need a GPU, test_cudnn_attention.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ops/cuda/attention_hopper.cuh"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/cudnn_library.h"
#include "test_util.h"

namespace nanoddp {
namespace {

namespace fs = std::filesystem;
using cuda::AttentionShape;

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// An empty file at `p`, its folders made.
std::string touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p).put('\n');
  return p.string();
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("nanoddp_cudnn_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

TEST(CudnnCandidates, ANamedPathIsTheOnlyPlaceTried) {
  TempDir tmp;
  EXPECT_EQ(cuda::cudnn_candidates("/opt/x/libcudnn.so.9", "/home/u", nullptr, nullptr, "/usr/bin"),
            std::vector<std::string>{"/opt/x/libcudnn.so.9"});
  // A folder stands for the libcudnn.so.9 in it.
  EXPECT_EQ(cuda::cudnn_candidates(tmp.path.c_str(), nullptr, nullptr, nullptr, nullptr),
            std::vector<std::string>{(tmp.path / "libcudnn.so.9").string()});
}

// The linker's search first, then PyTorch's wheel under each kind of Python prefix.
TEST(CudnnCandidates, FindsPyTorchsWheelUnderPythonPrefixes) {
  TempDir tmp;
  const std::string venv = touch(tmp.path / "venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9");
  const std::string conda = touch(tmp.path / "conda/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9");
  const std::string user = touch(tmp.path / "home/.local/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9");
  const std::string on_path = touch(tmp.path / "env/lib/python3.10/dist-packages/nvidia/cudnn/lib/libcudnn.so.9");
  touch(tmp.path / "env/bin/python3");
  const std::string path_env = "/nonexistent/bin:" + (tmp.path / "env/bin").string();
  const auto c = cuda::cudnn_candidates(nullptr, (tmp.path / "home").c_str(), (tmp.path / "venv").c_str(),
                                        (tmp.path / "conda").c_str(), path_env.c_str());
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.front(), "libcudnn.so.9");
  for (const auto& want : {venv, conda, user, on_path}) EXPECT_TRUE(contains(c, want)) << want;
  EXPECT_EQ(std::count(c.begin(), c.end(), on_path), 1) << "each file once";
}

TEST(OpenCudnn, SaysWhyEachPlaceFailed) {
  TempDir tmp;
  const std::string not_a_library = touch(tmp.path / "libcudnn.so.9");
  const auto lib = cuda::open_cudnn({"/nonexistent/libcudnn.so.9", not_a_library, "libm.so.6"});
  EXPECT_FALSE(lib.loaded);
  EXPECT_NE(lib.why_not.find("/nonexistent/libcudnn.so.9: no such file"), std::string::npos) << lib.why_not;
  EXPECT_NE(lib.why_not.find(not_a_library + ": "), std::string::npos) << lib.why_not;
  EXPECT_NE(lib.why_not.find("libm.so.6: not cuDNN 9's library: it lacks cudnnGetVersion"), std::string::npos)
      << lib.why_not;
}

// The process's own search, on a machine with cuDNN 9 (this build host's toolkit, PyTorch's wheel).
TEST(OpenCudnn, LoadsCudnn9WhereInstalled) {
  const auto& lib = cuda::cudnn_library();
  NANODDP_SKIP_UNLESS(lib.loaded, "skipped: no cuDNN 9 here (" + lib.why_not + ")");
  EXPECT_GE(lib.version, 90000u);
  EXPECT_LT(lib.version, 100000u);
  EXPECT_EQ(lib.version_string().substr(0, 2), "9.");
  for (void* f : {lib.fn.create, lib.fn.set_stream, lib.fn.backend_create, lib.fn.backend_set, lib.fn.backend_get,
                  lib.fn.backend_finalize, lib.fn.backend_execute, lib.fn.get_last_error_string})
    EXPECT_NE(f, nullptr);
}

TEST(AttentionRoute, ParsesEveryRouteAndRefusesOthers) {
  using R = cuda::AttentionRoute;
  EXPECT_EQ(cuda::parse_attention_route(nullptr), R::kAuto);
  EXPECT_EQ(cuda::parse_attention_route(""), R::kAuto);
  EXPECT_EQ(cuda::parse_attention_route("auto"), R::kAuto);
  EXPECT_EQ(cuda::parse_attention_route("cudnn"), R::kCudnn);
  EXPECT_EQ(cuda::parse_attention_route("cudnn_nondeterministic"), R::kCudnnNondeterministic);
  EXPECT_EQ(cuda::parse_attention_route("flash"), R::kFlash);
  EXPECT_EQ(cuda::parse_attention_route("hopper"), R::kHopper);
  EXPECT_EQ(cuda::parse_attention_route("reference"), R::kReference);
  NANODDP_EXPECT_ERROR(cuda::parse_attention_route("cuDNN"), "NANODDP_CUDA_ATTENTION=cuDNN is not a route",
                       "auto, cudnn, cudnn_nondeterministic, flash, hopper or reference");
}

// The Hopper route runs only on compute capability 9.0 in a build with sm_90a code; anywhere else
// it says why (the backend turns that into its error), and on such a GPU it says nothing.
TEST(AttentionRoute, HopperSaysWhyItCannotRun) {
  const std::string why = cuda::hopper_attention_unavailable(0);
  int count = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count > 0) {
    ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  }
  if (count > 0 && major == 9 && minor == 0 && why.find("sm_90a code") == std::string::npos) {
    EXPECT_EQ(why, "");
  } else {
    EXPECT_TRUE(why.find("compute capability") != std::string::npos || why.find("no sm_90a code") != std::string::npos)
        << why;
  }
  EXPECT_NE(cuda::describe_attention_route(cuda::AttentionRoute::kHopper).find("wgmma"), std::string::npos);
}

// cuDNN takes the training and prefill form without a sliding window in 16-bit types with head_dim a
// multiple of 8 up to 128 and 16-byte aligned rows; everything else stays on our kernels.
TEST(CudnnAttention, TakesOnlyTheCallsItRuns) {
  alignas(16) static char buf[64];
  const void* ok[] = {buf, buf + 16};
  const void* odd[] = {buf, buf + 8};
  const AttentionShape train{2, 128, 128, 8, 2, 64, 128};
  EXPECT_TRUE(cuda::cudnn_attention_takes(DType::BF16, train, ok, 2));
  EXPECT_TRUE(cuda::cudnn_attention_takes(DType::F16, train, ok, 2));
  EXPECT_FALSE(cuda::cudnn_attention_takes(DType::F32, train, ok, 2));
  EXPECT_FALSE(cuda::cudnn_attention_takes(DType::BF16, train, odd, 2));
  const AttentionShape decode{2, 1, 128, 8, 2, 64, 40};  // one new query after 39 cached keys
  EXPECT_FALSE(cuda::cudnn_attention_takes(DType::BF16, decode, ok, 2));
  const AttentionShape prefill{2, 40, 128, 8, 2, 64, 40};  // a prompt into a longer cache
  EXPECT_TRUE(cuda::cudnn_attention_takes(DType::BF16, prefill, ok, 2));
  // A sliding window (nanochat's short layers) runs on our flash kernels, never on cuDNN.
  const AttentionShape windowed{2, 128, 128, 8, 2, 64, 128, 32};
  EXPECT_FALSE(cuda::cudnn_attention_takes(DType::BF16, windowed, ok, 2));
  for (int64_t d : {4, 12, 136, 256}) {
    AttentionShape s = train;
    s.d = d;
    EXPECT_FALSE(cuda::cudnn_attention_takes(DType::BF16, s, ok, 2)) << "head_dim " << d;
  }
}

// Every operation of both graphs, and the operation graph, finalize on this machine's cuDNN: the
// descriptors' types, attributes and matmul shapes as cuDNN checks them (a matmul whose inner
// dimensions disagree fails here). Which engine runs them is the GPU's question.
TEST(CudnnAttention, GraphOperationsPassCudnnsChecks) {
  const auto& lib = cuda::cudnn_library();
  NANODDP_SKIP_UNLESS(lib.loaded, "skipped: no cuDNN 9 here (" + lib.why_not + ")");
  const AttentionShape shapes[] = {
      {1, 1, 1, 1, 1, 64, 1},             // a single token
      {2, 130, 130, 4, 2, 128, 130},      // grouped-query, partial tiles
      {16, 2048, 2048, 10, 10, 128, 2048},  // a depth-20 layer
      {1, 40, 64, 6, 2, 96, 40},          // a prompt into a longer cache (forward)
  };
  for (const auto& s : shapes)
    for (DType t : {DType::BF16, DType::F16})
      for (bool deterministic : {true, false})
        EXPECT_EQ(cuda::cudnn_attention_graph_problem(t, s, deterministic), "")
            << "batch " << s.batch << " tokens " << s.tq << " heads " << s.hq << "/" << s.hkv << " d " << s.d;
}

}  // namespace
}  // namespace nanoddp
