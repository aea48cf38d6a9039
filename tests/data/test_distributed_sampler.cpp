// data::DistributedSampler against torch.utils.data.DistributedSampler (python3-torch), index for
// index: shuffle on and off, several seeds and epochs, world sizes 1-4, drop_last both ways, and
// dataset sizes that do not divide (including smaller than the world). Exact: both draw the same
// integers from the same generator.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "data/distributed_sampler.h"
#include "test_util.h"

namespace nanoddp {
namespace {

// One case per line of the script's output: [size, world, rank, shuffle, seed, epoch, drop_last, [indices]].
constexpr const char* kScript = R"PY(
import json, torch
from torch.utils.data import DistributedSampler
cases = []
for size in (0, 1, 3, 10, 17, 64, 1001):
    for world in (1, 2, 3, 4):
        for shuffle in (False, True):
            for drop_last in (False, True):
                for seed, epoch in ((0, 0), (0, 3), (1234, 1), (2**40 + 7, 2)):
                    if not shuffle and (seed, epoch) != (0, 0):
                        continue
                    for rank in range(world):
                        s = DistributedSampler(range(size), num_replicas=world, rank=rank, shuffle=shuffle,
                                               seed=seed, drop_last=drop_last)
                        s.set_epoch(epoch)
                        cases.append([size, world, rank, shuffle, seed, epoch, drop_last, list(s)])
print(json.dumps(cases))
)PY";

TEST(DistributedSampler, EqualsTorchIndexForIndex) {
  const std::string no_torch = testing::torch_unavailable();
  NANODDP_SKIP_UNLESS_REFERENCE(no_torch.empty(), no_torch);
  testing::ScratchDir dir("sampler_reference");
  {
    std::ofstream(dir.str("ref.py")) << kScript;
  }
  const auto run = testing::run_command("/usr/bin/python3 " + dir.str("ref.py") + " 2>/dev/null");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto cases = nlohmann::json::parse(run.output);
  ASSERT_GT(cases.size(), 500u);
  for (const auto& c : cases) {
    data::DistributedSampler s(c[0], c[1], c[2], c[3], c[4], c[6]);
    s.set_epoch(c[5]);
    const auto want = c[7].get<std::vector<int64_t>>();
    EXPECT_EQ(s.indices(), want) << c.dump().substr(0, 200);
    EXPECT_EQ(s.num_samples(), static_cast<int64_t>(want.size()));
  }
}

TEST(DistributedSampler, RanksPartitionTheEpochAndBadArgumentsAreClear) {
  // Without drop_last every index appears, each rank gets the same count; with it, no index twice.
  for (bool drop : {false, true}) {
    std::vector<int> seen(10, 0);
    for (int r = 0; r < 3; r++) {
      data::DistributedSampler s(10, 3, r, true, 7, drop);
      s.set_epoch(1);
      EXPECT_EQ(s.indices().size(), drop ? 3u : 4u);
      for (int64_t i : s.indices()) seen[static_cast<size_t>(i)]++;
    }
    for (int count : seen) EXPECT_TRUE(drop ? count <= 1 : count >= 1);
  }
  NANODDP_EXPECT_ERROR(data::DistributedSampler(10, 2, 2), "rank 2 is outside [0, 2)");
  NANODDP_EXPECT_ERROR(data::DistributedSampler(10, 0, 0), "num_replicas must be at least 1");
}

}  // namespace
}  // namespace nanoddp
