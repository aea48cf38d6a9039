// Epochs that mean epochs, and the checkpoint of the best validation:
//  - with --num_epochs a step defaults to one micro-step, and an explicit step larger than the
//    training split is refused, naming the largest batch that fits (which then runs);
//  - one line per epoch (console and metrics.jsonl): the epoch's mean training loss and the
//    validation at its end;
//  - --save_best keeps the lowest-val-bpb checkpoint as OUT/best, spared by --keep_last and carried
//    across a resume;
//  - a warning every rank computes alike is printed once under the launcher, without a doubled
//    "[rank 0]".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_outputs.h"
#include "subprocess.h"
#include "train/checkpoint.h"
#include "core/error.h"
#include "data/dataset.h"
#include "train_test_util.h"

namespace nanoddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Proc;
using testing::ScratchDir;

std::vector<nlohmann::json> metrics_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// `nanoddp train` of the tiny model (train_test_util.h's sizes and classic recipe, in whose steps these
// tests count; a later --recipe overrides it) with the caller's length and batch.
std::vector<std::string> train_argv(const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> argv = {testing::nanoddp_binary(), "train", "--data", dataset(), "--out", out, "--depth",
                                   "2", "--aspect_ratio", "32", "--head_dim", "32", "--max_seq_len", "32",
                                   "--device_batch_size", "4", "--eval_tokens", "512", "--threads", "1",
                                   "--peak_flops", "1e9", "--timeout", "20", "--recipe", "classic"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

int64_t last_step(const std::string& out) {
  const auto losses = testing::training_losses(out);
  return losses.empty() ? 0 : losses.rbegin()->first;
}

// Both recipes: under 2026 a --total_batch_size of -1 is otherwise nanochat's automatic batch (65,536
// tokens here, larger than the split), but with --num_epochs it is one micro-step as under classic.
TEST(Epochs, TheDefaultStepIsOneMicroStepSoOneEpochTakesManySteps) {
  const int64_t train_tokens = data::read_dataset_meta(dataset()).train_tokens;
  for (const std::string recipe : {"classic", "2026"}) {
    ScratchDir out("epochs_default_batch_" + recipe);
    Proc job(train_argv(out.str(), {"--num_epochs", "1", "--recipe", recipe}));  // the last --recipe wins
    ASSERT_EQ(job.wait_exit(300s).value_or(-1), 0) << job.all();
    EXPECT_NE(job.out().find("128 tokens/step = 1 ranks x 4 rows x 32 tokens x 1 accumulation"), std::string::npos)
        << recipe << "\n" << job.out();
    // One epoch of one-micro-step steps: the split's whole micro-batches, one per step (more than one).
    EXPECT_GT(last_step(out.str()), 1) << recipe;
    EXPECT_LE(last_step(out.str()) * 128, train_tokens) << recipe;
    EXPECT_EQ(job.err().find("warning"), std::string::npos) << recipe << "\n" << job.err();
  }
}

// The largest batch that fits, as the error names it: it runs (one step for the epoch), and one
// micro-step more is refused again.
TEST(Epochs, AStepLargerThanTheSplitIsRefusedNamingTheLargestThatFits) {
  ScratchDir out("epochs_big_batch");
  Proc job(train_argv(out.str(), {"--num_epochs", "1", "--total_batch_size", std::to_string(128 * 100000)}));
  ASSERT_NE(job.wait_exit(120s).value_or(0), 0);
  std::smatch m;
  const std::string err = job.err();
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(the largest batch that fits is --total_batch_size (\d+))")))
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
  const int64_t fits = std::stoll(m[1]);
  ASSERT_GT(fits, 0);
  EXPECT_EQ(fits % 128, 0);
  Proc ok(train_argv(out.str(), {"--num_epochs", "1", "--total_batch_size", std::to_string(fits)}));
  ASSERT_EQ(ok.wait_exit(300s).value_or(-1), 0) << ok.all();
  EXPECT_EQ(last_step(out.str()), 1);
  ScratchDir out2("epochs_big_batch_2");
  Proc over(train_argv(out2.str(), {"--num_epochs", "1", "--total_batch_size", std::to_string(fits + 128)}));
  EXPECT_NE(over.wait_exit(120s).value_or(0), 0);
  EXPECT_NE(over.err().find("the largest batch that fits is --total_batch_size " + std::to_string(fits)),
            std::string::npos) << over.err();
}

// Each epoch line: its mean is that of the epoch's training lines, and its validation is the
// evaluation of the state after its last step.
TEST(Epochs, ALinePerEpochWithTheEpochsMeanTrainLossAndTheValidationAtItsEnd) {
  ScratchDir out("epochs_lines");
  auto o = tiny(out.str());
  o.batch.num_iterations = -1;
  o.batch.num_epochs = 2;
  o.batch.device_batch_size = 16;  // fewer, larger steps: a quicker test
  o.batch.total_batch_size = -1;
  o.eval.eval_every = -1;
  train_single(o);
  std::map<int64_t, std::vector<double>> epoch_losses;  // the training lines' epoch field (0-based)
  std::map<int64_t, double> val_bpb;                     // evaluation lines by step
  std::vector<nlohmann::json> ends;
  for (const auto& j : metrics_lines(out.str())) {
    if (j.contains("loss")) epoch_losses[j.at("epoch").get<int64_t>()].push_back(j.at("loss").get<double>());
    else if (j.contains("epoch_end")) ends.push_back(j);
    else if (j.contains("val_bpb")) val_bpb[j.at("step").get<int64_t>()] = j.at("val_bpb").get<double>();
  }
  ASSERT_EQ(ends.size(), 2u);
  int64_t step = 0;
  for (size_t e = 0; e < ends.size(); e++) {
    const auto& losses = epoch_losses[static_cast<int64_t>(e)];
    double mean = 0;
    for (double l : losses) mean += l;
    mean /= static_cast<double>(losses.size());
    step += static_cast<int64_t>(losses.size());
    EXPECT_EQ(ends[e].at("epoch_end").get<int64_t>(), static_cast<int64_t>(e) + 1);
    EXPECT_EQ(ends[e].at("step").get<int64_t>(), step);
    EXPECT_EQ(ends[e].at("train_steps").get<int64_t>(), static_cast<int64_t>(losses.size()));
    // Summed in the same order as the trainer does, in double: equal, not close.
    EXPECT_EQ(ends[e].at("train_loss").get<double>(), mean);
    ASSERT_TRUE(val_bpb.count(step)) << "no evaluation at the end of epoch " << e + 1;
    EXPECT_EQ(ends[e].at("val_bpb").get<double>(), val_bpb[step]);
  }
}

// OUT/best is the evaluated state (after step 0) with the lowest val bpb, and its checkpoint is kept.
TEST(SaveBest, BestPointsAtTheLowestValBpbAndIsKept) {
  ScratchDir out("save_best_fresh");
  auto o = tiny(out.str());
  o.eval.eval_every = 2;
  o.output.keep_last = 1;
  o.output.save_best = true;
  train_single(o);
  const auto bpb = testing::training_metric(out.str(), "val_bpb");
  int64_t lowest = -1;
  for (const auto& [step, v] : bpb)
    if (step > 0 && (lowest < 0 || v < bpb.at(lowest))) lowest = step;
  ASSERT_TRUE(fs::is_symlink(out.str("best")));
  EXPECT_EQ(train::best_checkpoint(out.str()), std::optional<int64_t>(lowest));
  EXPECT_TRUE(fs::exists(out.str("best/DONE")));
  // keep_last 1: the newest and the best, nothing else.
  std::vector<int64_t> kept = {lowest};
  if (lowest != 12) kept.push_back(12);
  EXPECT_EQ(train::complete_checkpoint_steps(out.str()), kept);
}

// A resumed run carries the best it had: a later evaluation that is worse leaves OUT/best where it
// was, and saves every step with --keep_last 1 do not rotate it away. (The best's recorded bpb is
// lowered by hand so that no later evaluation can beat it, whatever training does.)
TEST(SaveBest, AResumeKeepsTheBestItHadAndRotationSparesIt) {
  ScratchDir out("save_best_resume");
  auto o = tiny(out.str());
  o.eval.eval_every = 4;
  o.output.save_every = 1;
  o.output.keep_last = 1;
  o.output.save_best = true;
  o.output.stop_at = 4;
  train_single(o);
  ASSERT_EQ(train::best_checkpoint(out.str()), std::optional<int64_t>(4));
  const std::string meta_path = out.str("checkpoints/step_000004/meta.json");
  auto meta = nlohmann::json::parse(std::ifstream(meta_path));
  meta["val_bpb"] = 1e-6;
  std::ofstream(meta_path) << meta.dump(2);
  o.output.stop_at = -1;
  o.output.resume = resume_spec("latest");
  train_single(o);
  EXPECT_EQ(train::best_checkpoint(out.str()), std::optional<int64_t>(4));
  EXPECT_EQ(train::complete_checkpoint_steps(out.str()), (std::vector<int64_t>{4, 12}));
}

TEST(SaveBest, ARunThatEvaluatesNothingIsRefused) {
  ScratchDir out("save_best_no_eval");
  auto o = tiny(out.str());
  o.chat.stage = train::RunStage::Rl;
  o.rl.task = "arithmetic";
  o.output.save_best = true;
  try {
    train_single(o);
    FAIL() << "trained";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--save_best"), std::string::npos) << e.what();
  }
}

// Under the launcher every rank would compute the same warning: it is printed once, by rank 0, and
// only the launcher names the rank.
TEST(Warnings, AWarningAboutTheRunsSizesIsPrintedOnceWithOneRankPrefix) {
  ScratchDir out("warn_once");
  // Two ranks' micro-steps (256 tokens) past the whole split: one step reads it more than once.
  const int64_t batch = (data::read_dataset_meta(dataset()).train_tokens / 256 + 2) * 256;
  std::vector<std::string> argv = {testing::nanoddp_binary(), "run", "--standalone", "--nproc_per_node", "2"};
  const auto train = train_argv(out.str(), {"--total_batch_size", std::to_string(batch), "--num_iterations", "1"});
  argv.insert(argv.end(), train.begin() + 1, train.end());
  Proc job(argv);
  ASSERT_EQ(job.wait_exit(300s).value_or(-1), 0) << job.all();
  const std::string err = job.err();
  size_t count = 0;
  for (size_t at = err.find("is larger than the whole training split"); at != std::string::npos;
       at = err.find("is larger than the whole training split", at + 1))
    count++;
  EXPECT_EQ(count, 1u) << err;
  EXPECT_NE(err.find("[rank 0]: warning: one step"), std::string::npos) << err;
  EXPECT_EQ(err.find("[rank 0] warning"), std::string::npos) << err;
}

}  // namespace
}  // namespace nanoddp
