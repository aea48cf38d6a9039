// RL (train/rl.h, chat/rollout.h), through the nanoddp binary as users run it:
//  - on a toy task where it must, RL raises the mean reward and the evaluated accuracy;
//  - 2 ranks sample, reward and step like 1 rank (questions strided, rewards all-reduced);
//  - a run stopped and resumed ends bit for bit like a straight one (question cursor, optimizer);
//  - bad input: no task, greedy sampling, a world size that does not divide the questions per step;
//  - --reward chooses how a completion scores; a run whose samples all score alike says it cannot
//    learn; the summary counts the tokens sampled and trained.
//
// The toy task: SFT teaches "Pick a digit." -> "#### d" with d uniform, so about 1 answer in 10 is
// a 7; RL then rewards only 7. The policy gradient has one direction to go, and a tiny model gets
// there in a few dozen steps.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "corpus.h"
#include "run_outputs.h"
#include "subprocess.h"
#include "test_util.h"

namespace nanoddp {
namespace {

using namespace std::chrono_literals;
using testing::nanoddp_argv;
using testing::nanoddp_run_argv;
using testing::Proc;
using testing::ScratchDir;

void run_ok(const std::vector<std::string>& argv) {
  Proc p(argv);
  ASSERT_EQ(p.wait_exit(120s), 0) << p.all();
}

// The SFT checkpoint of the toy task, made once per test process, and the RL questions file.
struct Toy {
  ScratchDir dir{"rl_toy_" + std::to_string(::getpid())};
  std::string sft = dir.str("sft"), questions = dir.str("seven.jsonl");
  Toy() {
    testing::make_byte_dataset(dir.str(), 200, 5);
    run_ok(nanoddp_argv({"train", "--data", dir.str("data"), "--out", dir.str("base"), "--depth", "2",
                         "--aspect_ratio", "32", "--head_dim", "32", "--max_seq_len", "64", "--device_batch_size", "8",
                         "--total_batch_size", "512", "--num_iterations", "20", "--eval_every", "-1",
                         "--eval_tokens", "512", "--threads", "1", "--peak_flops", "1e9"}));
    std::ofstream sft_data(dir.str("digits.jsonl")), rl_data(questions);
    for (int i = 0; i < 400; i++) {
      // d = i * 7 mod 10 in a scrambled order: each digit equally often.
      const int d = (i * 7 + i / 10) % 10;
      sft_data << nlohmann::json{{"messages", {{{"role", "user"}, {"content", "Pick a digit."}},
                                               {{"role", "assistant"}, {"content", "#### " + std::to_string(d)}}}}}
                      .dump()
               << "\n";
    }
    for (int i = 0; i < 64; i++)
      rl_data << R"({"messages": [{"role": "user", "content": "Pick a digit."}], "answer": "7"})" << "\n";
    sft_data.close();
    rl_data.close();
    run_ok(nanoddp_argv({"sft", "--source", dir.str("base"), "--data", dir.str("digits.jsonl"), "--out", sft,
                   "--device_batch_size", "8", "--num_iterations", "30", "--threads", "1", "--peak_flops", "1e9"}));
  }
};

const Toy& toy() {
  static Toy t;
  return t;
}

// `nanoddp rl` on the toy task with its own learning rates (rl's default, 5% of base training's,
// is for models that sample long answers; the toy's answer is two tokens).
std::vector<std::string> rl(const std::string& out, int steps, int examples_per_step = 4) {
  return {"rl", "--source", toy().sft, "--task", toy().questions, "--out", out, "--num_samples", "8",
          "--examples_per_step", std::to_string(examples_per_step), "--num_iterations", std::to_string(steps),
          "--max_new_tokens", "8", "--init_lr_frac", "1", "--matrix_lr", "0.004", "--unembedding_lr", "0.004",
          "--embedding_lr", "0.04",
          "--threads", "1", "--timeout", "30"};
}

double accuracy(const std::string& checkpoint) {
  Proc p(nanoddp_argv({"eval", "--checkpoint", checkpoint, "--task", toy().questions, "--num_samples", "4",
                 "--temperature", "1", "--max_tokens", "8"}));
  EXPECT_EQ(p.wait_exit(60s), 0) << p.all();
  const std::string out = p.out();
  return nlohmann::json::parse(out.substr(out.rfind('{')))["accuracy"];
}

TEST(Rl, RaisesTheMeanRewardOnAToyTaskWhereItMust) {
  ScratchDir out("rl_rises");
  Proc run(nanoddp_argv(rl(out.str(), 30)));
  ASSERT_EQ(run.wait_exit(120s), 0) << run.all();
  // A run that learns has samples that differ: no warning that it cannot.
  EXPECT_EQ(run.all().find("RL is not learning"), std::string::npos) << run.all();
  const auto reward = testing::training_metric(out.str(), "reward");
  ASSERT_EQ(reward.size(), 30u);
  double last = 0;
  for (int64_t s = 26; s <= 30; s++) last += reward.at(s) / 5;
  std::printf("reward: step 1 %.3f, steps 26-30 %.3f\n", reward.at(1), last);
  // Margins, not exact values: the trajectory depends on the CPU's float rounding (oneDNN picks
  // AVX-512 or AMX kernels). Measured on Zen 5: step 1 0.125, steps 26-30 ~0.99; by chance alone
  // (no learning) the mean of 160 samples at p = 0.1 stays below 0.25 with probability > 0.9999.
  EXPECT_LT(reward.at(1), 0.35);
  EXPECT_GT(last, 0.6);
  const double before = accuracy(toy().sft), after = accuracy(out.str());
  std::printf("accuracy before RL %.3f, after %.3f\n", before, after);
  EXPECT_LT(before, 0.3);
  EXPECT_GT(after, 0.6);
  std::ifstream meta(out.str("checkpoints/step_000030/meta.json"));
  const auto j = nlohmann::json::parse(meta);
  EXPECT_EQ(j["stage"], "rl");
  EXPECT_NE(j["source"].get<std::string>().find("sft"), std::string::npos);
}

TEST(Rl, TwoRanksSampleRewardAndStepLikeOneRank) {
  ScratchDir one("rl_one"), two("rl_two");
  run_ok(nanoddp_argv(rl(one.str(), 3)));
  run_ok(nanoddp_run_argv(2, {}, rl(two.str(), 3)));
  const auto r1 = testing::training_metric(one.str(), "reward"), r2 = testing::training_metric(two.str(), "reward");
  const auto l1 = testing::training_losses(one.str()), l2 = testing::training_losses(two.str());
  ASSERT_EQ(r1.size(), 3u);
  ASSERT_EQ(r2.size(), 3u);
  // Step 1 samples from the same weights with one stream per (question, sample), whichever rank
  // draws it: the same completions, so exactly the same rewards.
  EXPECT_EQ(r1.at(1), r2.at(1));
  // The gradients are the same sums in another order (each rank sums its questions, then the
  // all-reduce averages): equal to f32 rounding, ~1e-7 relative per step.
  for (int64_t s = 1; s <= 3; s++) EXPECT_NEAR(l1.at(s), l2.at(s), 1e-4 * std::abs(l1.at(s))) << "step " << s;
  const auto w1 = testing::checkpoint_weights(one.str("checkpoints/step_000003")),
             w2 = testing::checkpoint_weights(two.str("checkpoints/step_000003"));
  ASSERT_EQ(w1.size(), w2.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < w1.size(); i++) {
    diff += (double(w1[i]) - w2[i]) * (double(w1[i]) - w2[i]);
    norm += double(w1[i]) * w1[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-4);
}

// In every --dtype: fp16 scales the policy-gradient loss too (Note [dynamic loss scaling] in
// train/loss_scaler.h), and its scale resumes with the run.
class RlDtype : public ::testing::TestWithParam<std::string> {};

TEST_P(RlDtype, AStoppedAndResumedRunEndsBitForBitLikeAStraightOne) {
  const std::string dtype = GetParam();
  ScratchDir straight("rl_straight_" + dtype), resumed("rl_resumed_" + dtype);
  auto args = [&](const std::string& out) {
    auto a = rl(out, 6);
    a.insert(a.end(), {"--dtype", dtype});
    return a;
  };
  run_ok(nanoddp_argv(args(straight.str())));
  auto first = args(resumed.str());
  first.insert(first.end(), {"--stop_at", "3"});
  run_ok(nanoddp_argv(first));
  auto second = args(resumed.str());
  second.insert(second.end(), {"--resume", "latest"});
  run_ok(nanoddp_argv(second));
  if (dtype == "fp16") {
    EXPECT_EQ(testing::training_metric(straight.str(), "loss_scale").size(), 6u);
  }
  EXPECT_EQ(testing::training_metric(resumed.str(), "reward"), testing::training_metric(straight.str(), "reward"));
  EXPECT_EQ(testing::checkpoint_weights(resumed.str("checkpoints/step_000006")),
            testing::checkpoint_weights(straight.str("checkpoints/step_000006")));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RlDtype, ::testing::Values("fp32", "bf16", "fp16"));

// The toy SFT replies "#### d". The questions' answer is "7": under the default rule (auto: contains,
// the answer having no "####") "#### 7" scores, under --reward exact no reply can. From the same
// weights and seeds step 1 samples the same completions, so only the rule differs.
TEST(Rl, TheRewardFlagChoosesHowACompletionScores) {
  ScratchDir contains("rl_reward_auto"), exact("rl_reward_exact");
  Proc by_default(nanoddp_argv(rl(contains.str(), 1)));
  ASSERT_EQ(by_default.wait_exit(120s), 0) << by_default.all();
  EXPECT_NE(by_default.out().find("| reward contains"), std::string::npos) << by_default.out();
  auto args = rl(exact.str(), 1);
  args.insert(args.end(), {"--reward", "exact"});
  run_ok(nanoddp_argv(args));
  EXPECT_GT(testing::training_metric(contains.str(), "reward").at(1), 0);
  EXPECT_EQ(testing::training_metric(exact.str(), "reward").at(1), 0);
}

// eval scores with the same rules, and its result line says which it used.
TEST(Rl, EvalScoresByTheRewardFlag) {
  auto eval = [](const std::string& reward) {
    Proc p(nanoddp_argv({"eval", "--checkpoint", toy().sft, "--task", toy().questions, "--num_samples", "4",
                   "--temperature", "1", "--max_tokens", "8", "--reward", reward}));
    EXPECT_EQ(p.wait_exit(60s), 0) << p.all();
    const std::string out = p.out();
    return nlohmann::json::parse(out.substr(out.rfind('{')));
  };
  const auto by_default = eval("auto"), exact = eval("exact");
  EXPECT_EQ(by_default["reward"], "contains");  // auto, for a file whose answers hold no "####"
  EXPECT_EQ(exact["reward"], "exact");
  // 256 answers at about 1 in 10 right ("#### 7"): none right by chance has probability 0.9^256 < 1e-11.
  EXPECT_GT(by_default["correct"].get<int64_t>(), 0);
  EXPECT_EQ(exact["correct"].get<int64_t>(), 0);  // "#### 7" is not the whole reply "7"
  Proc bad(nanoddp_argv({"eval", "--checkpoint", toy().sft, "--task", toy().questions, "--reward", "fuzzy"}));
  EXPECT_NE(bad.wait_exit(60s), 0);
  EXPECT_NE(bad.err().find("--reward: must be auto, gsm8k, contains or exact (got 'fuzzy')"), std::string::npos)
      << bad.err();
}

// Every sample scoring 0 for RlRunTally::kQuietSteps (5) steps in a row: one warning naming what
// to do (was: "loss 0.000000 ... reward 0.0000" with no word). 7 steps: printed once, not per step.
// The summary counts the tokens sampled and trained (was: "16 tokens" where hundreds were sampled).
TEST(Rl, SaysOnceWhenItCannotLearnAndCountsSampledAndTrainedTokens) {
  ScratchDir out("rl_quiet");
  auto args = rl(out.str(), 7);
  args.insert(args.end(), {"--reward", "exact"});
  Proc p(nanoddp_argv(args));
  ASSERT_EQ(p.wait_exit(120s), 0) << p.all();
  const std::string all = p.all();
  for (const auto& [step, r] : testing::training_metric(out.str(), "reward")) ASSERT_EQ(r, 0) << "step " << step;
  const std::string warning = "RL is not learning: in each of the last 5 steps every sample scored 0";
  const size_t at = all.find(warning);
  ASSERT_NE(at, std::string::npos) << all;
  std::printf("%s\n", all.substr(at, all.find('\n', at) - at).c_str());
  EXPECT_EQ(all.find(warning, at + 1), std::string::npos) << "printed more than once:\n" << all;
  for (const char* advice : {"--temperature", "--num_samples", "--reward contains"})
    EXPECT_NE(all.find(advice, at), std::string::npos) << advice;
  // Printed with step 5's line (just above it), not earlier nor later.
  EXPECT_GT(at, all.find("step 00004/00007"));
  EXPECT_LT(at, all.find("step 00006/00007"));
  double sampled = 0, trained = 0;
  for (const auto& [step, n] : testing::training_metric(out.str(), "sampled_tokens")) sampled += n;
  for (const auto& [step, n] : testing::training_metric(out.str(), "trained_tokens")) trained += n;
  // 4 questions x 8 samples x at least 1 token (the end token) per step.
  EXPECT_GE(sampled, 7 * 4 * 8);
  EXPECT_EQ(trained, 0);  // no sample had an advantage: nothing was trained on
  const std::string summary = fmt::format("({:.0f} tokens sampled (", sampled);
  const size_t done = all.find("done: ");
  ASSERT_NE(done, std::string::npos) << all;
  std::printf("%s\n", all.substr(done, all.find('\n', done) - done).c_str());
  EXPECT_NE(all.find(summary), std::string::npos) << summary << " not in\n" << all;
  EXPECT_NE(all.find(fmt::format("), {:.0f} trained)", trained)), std::string::npos) << all;
}

TEST(Rl, BadInputEndsWithOneClearLine) {
  ScratchDir out("rl_bad");
  auto expect_error = [](std::vector<std::string> argv, const std::string& says) {
    Proc p(argv);
    EXPECT_NE(p.wait_exit(60s), 0) << p.all();
    EXPECT_NE(p.err().find(says), std::string::npos) << p.err();
  };
  auto no_task = rl(out.str(), 2);
  no_task.erase(no_task.begin() + 3, no_task.begin() + 5);
  expect_error(nanoddp_argv(no_task), "--task is required");
  auto greedy = rl(out.str(), 2);
  greedy.insert(greedy.end(), {"--temperature", "0"});
  expect_error(nanoddp_argv(greedy), "--temperature must be positive");
  // Samples that cannot differ teach nothing (was: every advantage 0, the source saved, exit 0).
  auto one_sample = rl(out.str(), 2);
  one_sample.insert(one_sample.end(), {"--num_samples", "1"});
  expect_error(nanoddp_argv(one_sample), "--num_samples must be at least 2");
  auto top_one = rl(out.str(), 2);
  top_one.insert(top_one.end(), {"--top_k", "1"});
  expect_error(nanoddp_argv(top_one), "--top_k must be 0 (all tokens) or at least 2");
  auto bad_reward = rl(out.str(), 2);
  bad_reward.insert(bad_reward.end(), {"--reward", "fuzzy"});
  expect_error(nanoddp_argv(bad_reward), "--reward: must be auto, gsm8k, contains or exact (got 'fuzzy')");
  expect_error(nanoddp_run_argv(2, {}, rl(out.str(), 2, 3)),
               "--examples_per_step 3 is not a multiple of the world size 2");
  auto missing = rl(out.str(), 2);
  missing[4] = out.str("nope.jsonl");
  expect_error(nanoddp_argv(missing), "the questions file " + out.str("nope.jsonl") + " does not exist");
  // A question too long for the context (64 bytes), third of the file: refused at start (was: when
  // drawn, mid-run), and --out is not claimed.
  const std::string long_file = out.str("long.jsonl");
  {
    std::ofstream f(long_file);
    for (int i = 0; i < 4; i++)
      f << nlohmann::json{{"messages", {{{"role", "user"}, {"content", std::string(i == 2 ? 100 : 5, 'x')}}}},
                          {"answer", "7"}}.dump() << "\n";
  }
  auto too_long = rl(out.str("long_run"), 2);
  too_long[4] = long_file;
  expect_error(nanoddp_argv(too_long), "RL question 3 of --task " + long_file);
  EXPECT_FALSE(std::filesystem::exists(out.str("long_run/run.json")));
}

}  // namespace
}  // namespace nanoddp
