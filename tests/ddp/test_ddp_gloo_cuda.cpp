// Several ranks on one GPU, as a machine without NCCL (or with fewer GPUs than ranks) runs them:
// `nanoddp run --nproc_per_node 2 train --device cuda:0 --backend gloo`, whose Gloo group stages
// the CUDA gradients through host memory (Note [staging] in comm/host_staging.h), trains like one
// rank on that GPU with 2 accumulation steps, bit for bit, for every --zero mode and both
// optimizers: the same losses and the same final weights. Skipped without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include "core/device.h"
#include "corpus.h"
#include "run_outputs.h"
#include "subprocess.h"
#include "test_util.h"

namespace nanoddp {
namespace {

using namespace std::chrono_literals;
using testing::Proc;
using testing::ScratchDir;

const std::string& dataset() { return testing::process_byte_dataset("gloo_cuda_dataset"); }

// A tiny model on GPU 0; 2 rows of 4 x 32 tokens per step, whatever the world size.
std::vector<std::string> train_flags(const std::string& out, int zero, const std::string& opt) {
  return {"train", "--data", dataset(), "--out", out, "--device", "cuda:0", "--depth", "2", "--aspect_ratio", "32",
          "--head_dim", "32", "--max_seq_len", "32", "--device_batch_size", "4", "--total_batch_size",
          std::to_string(4 * 32 * 2), "--num_iterations", "6", "--eval_every", "3", "--eval_tokens", "512",
          "--threads", "1", "--timeout", "60", "--zero", std::to_string(zero), "--optimizer", opt,
          // f32 Newton-Schulz: bf16 turns reduction-order differences into percents (test_torch_golden).
          "--muon_precision", "f32"};
}

struct Mode {
  int zero;
  std::string optimizer;
};

class TwoRanksOnOneGpu : public ::testing::TestWithParam<Mode> {};

TEST_P(TwoRanksOnOneGpu, EqualOneRankWithTwoAccumulationStepsOverGloo) {
  NANODDP_REQUIRE_GPU();
  const auto [zero, opt] = GetParam();
  ScratchDir one(fmt::format("gloo_cuda_one_{}_{}", zero, opt)), two(fmt::format("gloo_cuda_two_{}_{}", zero, opt));
  const std::vector<std::string> single = testing::nanoddp_argv(train_flags(one.str(), zero, opt));
  std::vector<std::string> launched = testing::nanoddp_run_argv(2, {}, train_flags(two.str(), zero, opt));
  launched.insert(launched.end(), {"--backend", "gloo"});
  Proc p1(single);
  ASSERT_EQ(p1.wait_exit(300s), 0) << p1.all();
  Proc p2(launched);
  ASSERT_EQ(p2.wait_exit(300s), 0) << p2.all();
  EXPECT_NE(p2.all().find("| backend gloo"), std::string::npos) << p2.all();
  auto la = testing::training_losses(one.str()), lb = testing::training_losses(two.str());
  ASSERT_EQ(la.size(), 6u);
  // Bit for bit: each rank's micro-batch gradient is the one the single rank computes for it, and
  // the sum of two then halved is exact (Note [accumulation order] in model/gpt.cpp).
  EXPECT_EQ(lb, la);
  EXPECT_EQ(testing::checkpoint_weights(two.str("checkpoints/step_000006")),
            testing::checkpoint_weights(one.str("checkpoints/step_000006")));
}

INSTANTIATE_TEST_SUITE_P(Modes, TwoRanksOnOneGpu,
                         ::testing::Values(Mode{0, "muon"}, Mode{0, "adamw"}, Mode{1, "muon"}, Mode{1, "adamw"},
                                           Mode{2, "muon"}, Mode{2, "adamw"}),
                         [](const auto& info) {
                           return "zero" + std::to_string(info.param.zero) + "_" + info.param.optimizer;
                         });

}  // namespace
}  // namespace nanoddp
