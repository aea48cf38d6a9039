// The Gloo group on a GPU: ranks as threads of this process, every rank on GPU 0, their CUDA
// tensors staged through page-locked host memory (Note [staging] in comm/host_staging.h). Every
// collective is exact for 2 and 3 ranks sharing the one GPU (NCCL refuses that), and a collective
// issued right after a kernel sees that kernel's result. Skipped without a GPU.
#include <gtest/gtest.h>


#include "collective_checks.h"
#include "comm/gloo_group.h"
#include "core/device.h"
#include "rendezvous/prefix_store.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

using Failures = std::vector<std::string>;

// Runs `fn` on `world` ranks, one thread and one GlooGroup on GPU 0 each.
template <typename Fn>
Failures run_ranks_on_gpu0(int world, Fn fn) {
  return testing::run_thread_ranks(world, [&](const std::shared_ptr<Store>& store, int r) {
    GlooGroupOptions o;
    o.bind_address = "127.0.0.1";
    o.device = Device::cuda(0);
    GlooGroup group(std::make_shared<PrefixStore>("gloo", store), r, world, o);
    return fn(group);
  });
}

TEST(GlooCuda, EveryCollectiveIsExactWithRanksSharingOneGpu) {
  NANODDP_REQUIRE_GPU();
  for (int world : {2, 3}) {
    testing::CheckOptions o;  // the group's device() is cuda:0: the checks make CUDA tensors
    o.salt = uint64_t(world);
    Failures f = run_ranks_on_gpu0(world, [&](GlooGroup& g) { return testing::check_all_collectives(g, o); });
    EXPECT_TRUE(f.empty()) << "world " << world << ":\n" << testing::join_lines(f);
  }
}

// The staging copy waits for the work queued before the collective: a copy from pageable host
// memory, which core's copy() queues on the compute stream without waiting for the device, is what
// gets reduced, round after round.
TEST(GlooCuda, TheCollectiveReadsWhatTheComputeStreamWroteBeforeIt) {
  NANODDP_REQUIRE_GPU();
  Failures f = run_ranks_on_gpu0(2, [](GlooGroup& g) {
    Failures out;
    const int64_t n = 1 << 22;
    Tensor t = Tensor::empty({n}, DType::F32, g.device());
    for (int k = 1; k <= 4; k++) {
      Tensor host = Tensor::empty({n}, DType::F32);
      for (int64_t i = 0; i < n; i++) host.data<float>()[i] = float(k * (g.rank() + 1));
      copy(t, host);
      g.allreduce(t, ReduceOp::Sum)->wait();
      std::vector<float> got = nanoddp::testing::to_vector(t);
      const float want = float(3 * k);  // k * 1 + k * 2
      for (int64_t i = 0; i < n; i += 4099)
        if (got[size_t(i)] != want) {
          out.push_back(
              fmt::format("rank {}: round {}: element {} is {}, not {}", g.rank(), k, i, got[size_t(i)], want));
          break;
        }
    }
    return out;
  });
  EXPECT_TRUE(f.empty()) << testing::join_lines(f);
}

}  // namespace
}  // namespace nanoddp::dist
