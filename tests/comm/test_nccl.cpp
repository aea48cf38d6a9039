// The NCCL process group with ranks as threads of this process, one GPU each (every visible GPU;
// world size 1 on a one-GPU machine), sharing one in-memory store: every collective against
// exact expected values (collective_checks.h), and the dtype/op pairs NCCL cannot reduce refused
// with a clear error. Skipped without a GPU.
#include <gtest/gtest.h>

#include <thread>

#include "collective_checks.h"
#include "comm/nccl_group.h"
#include "core/device.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/prefix_store.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

using Failures = std::vector<std::string>;

// Runs `fn` on one NcclGroup per visible GPU, each on its own thread; returns all ranks' failures.
template <typename Fn>
Failures run_gpu_ranks(Fn fn) {
  const int world = cuda_device_count();
  auto store = std::make_shared<HashStore>();
  std::vector<Failures> per_rank(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; r++) {
    threads.emplace_back([&, r] {
      try {
        NcclGroup group(std::make_shared<PrefixStore>("nccl", store), r, world, Device::cuda(r), NcclGroupOptions{});
        per_rank[r] = fn(group);
      } catch (const std::exception& e) {
        per_rank[r].push_back(fmt::format("rank {} threw: {}", r, e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
  Failures all;
  for (auto& f : per_rank) all.insert(all.end(), f.begin(), f.end());
  return all;
}

TEST(NcclGroup, EveryCollectiveIsExactOnEveryVisibleGpu) {
  NANODDP_SKIP_UNLESS(cuda_device_count() > 0, "skipped: no GPU");
  testing::CheckOptions o;
  // NCCL averages only floating-point tensors (nccl_group.cpp refuses avg of integers, tested below).
  o.dtypes = {DType::F32, DType::F64};
  o.large_dtypes = {DType::F32};
  Failures f = run_gpu_ranks([&](NcclGroup& g) { return testing::check_all_collectives(g, o); });
  std::string all;
  for (auto& l : f) all += l + "\n";
  EXPECT_TRUE(f.empty()) << all;
}

TEST(NcclGroup, AverageOfIntegersIsAClearError) {
  NANODDP_SKIP_UNLESS(cuda_device_count() > 0, "skipped: no GPU");
  Failures f = run_gpu_ranks([](NcclGroup& g) {
    Tensor t = Tensor::zeros({8}, DType::I32, g.device());
    NANODDP_EXPECT_ERROR(g.allreduce(t, ReduceOp::Avg)->wait(), "use sum and divide");
    return Failures{};  // the check above reports for itself
  });
  EXPECT_TRUE(f.empty()) << (f.empty() ? "" : f[0]);
}

}  // namespace
}  // namespace nanoddp::dist
