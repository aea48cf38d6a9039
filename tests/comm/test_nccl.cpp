// The NCCL process group with ranks as threads of this process, one GPU each (every visible GPU;
// world size 1 on a one-GPU machine), sharing one in-memory store: every collective against
// exact expected values (collective_checks.h), and the dtype/op pairs NCCL cannot reduce refused
// with a clear error. Skipped without a GPU.
#include <gtest/gtest.h>

#include "collective_checks.h"
#include "comm/nccl_group.h"
#include "core/device.h"
#include "rendezvous/prefix_store.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

using Failures = std::vector<std::string>;

// Runs `fn` on one NcclGroup per visible GPU, each on its own thread; returns all ranks' failures.
template <typename Fn>
Failures run_gpu_ranks(Fn fn) {
  const int world = cuda_device_count();
  return testing::run_thread_ranks(world, [&](const std::shared_ptr<Store>& store, int r) {
    NcclGroup group(std::make_shared<PrefixStore>("nccl", store), r, world, Device::cuda(r), NcclGroupOptions{});
    return fn(group);
  });
}

TEST(NcclGroup, EveryCollectiveIsExactOnEveryVisibleGpu) {
  NANODDP_REQUIRE_GPU();
  testing::CheckOptions o;
  // NCCL averages only floating-point tensors (nccl_group.cpp refuses avg of integers, tested below).
  o.dtypes = {DType::F32, DType::F64};
  o.large_dtypes = {DType::F32};
  Failures f = run_gpu_ranks([&](NcclGroup& g) { return testing::check_all_collectives(g, o); });
  EXPECT_TRUE(f.empty()) << testing::join_lines(f);
}

TEST(NcclGroup, AverageOfIntegersIsAClearError) {
  NANODDP_REQUIRE_GPU();
  Failures f = run_gpu_ranks([](NcclGroup& g) {
    Tensor t = Tensor::zeros({8}, DType::I32, g.device());
    NANODDP_EXPECT_ERROR(g.allreduce(t, ReduceOp::Avg)->wait(), "use sum and divide");
    return Failures{};  // the check above reports for itself
  });
  EXPECT_TRUE(f.empty()) << (f.empty() ? "" : f[0]);
}

}  // namespace
}  // namespace nanoddp::dist
