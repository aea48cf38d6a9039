// The chat stages of a 2026 checkpoint (train/recipe_options.h): sft and rl take the source's
// recipe and train it with nanochat's 2026 optimizer and its chat-stage settings (chat_sft, chat_rl
// at commit 92d63d4):
//  - the settings: chat_sft's lrs inherited from the base run, init_lr_frac 0.8, warmdown over the
//    last half, no batch scaling, Muon's weight decay unscheduled; chat_rl's momentum fixed at 0.95;
//  - through the binary: sft and rl of a tiny 2026 base save the 2026 optimizer's state (NorMuon's
//    variance), resume bit for bit, and 2 ranks equal 1 rank with 2 accumulation steps; the SFT
//    checkpoint samples, chats and evaluates;
//  - sft starts from the base's optimizer state (chat_sft's --load-optimizer), refused in one line
//    when it does not fit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/safetensors.h"
#include "corpus.h"
#include "run_outputs.h"
#include "subprocess.h"
#include "test_util.h"
#include "train/plan.h"
#include "train/recipe_options.h"

namespace nanoddp {
namespace {

using namespace std::chrono_literals;
using testing::nanoddp_argv;
using testing::nanoddp_run_argv;
using testing::Proc;
using testing::ScratchDir;
using Argv = std::vector<std::string>;
namespace fs = std::filesystem;

auto given_of(const std::set<std::string>& flags) {
  return [flags](const std::string& f) { return flags.count(f) > 0; };
}

// sft's options as `nanoddp sft` sets them before its flags (cli/cmd_sft.cpp).
train::TrainOptions sft_options() {
  train::TrainOptions o;
  o.chat.stage = train::RunStage::Sft;
  o.batch.num_epochs = 1;
  o.optim.warmdown_ratio = 1.0;
  o.batch.total_batch_size = -1;
  return o;
}

TEST(ChatRecipe2026, SftTakesChatSftsSettingsAndTheBaseRunsLearningRates) {
  train::TrainOptions o = sft_options();
  o.optim.matrix_lr = 0.03;  // as if given
  const nlohmann::json source = {{"embedding_lr", 0.25}, {"unembedding_lr", 0.006}, {"matrix_lr", 0.01}};
  train::apply_chat_recipe_defaults(o, true, given_of({"matrix_lr"}), source);
  EXPECT_EQ(o.optim.embedding_lr, 0.25);    // the base run's
  EXPECT_EQ(o.optim.unembedding_lr, 0.006);
  EXPECT_EQ(o.optim.matrix_lr, 0.03);       // given
  EXPECT_EQ(o.optim.init_lr_frac, 0.8);
  EXPECT_EQ(o.optim.warmdown_ratio, 0.5);
  EXPECT_EQ(o.optim.final_lr_frac, 0.0);
  EXPECT_EQ(o.optim.weight_decay, 0.0);
  // A source without recorded options (an import): chat_sft's fallbacks (its unembedding 0.004, not
  // base_train's 0.008: nanochat's code, which we follow where it and the defaults differ).
  train::TrainOptions imported = sft_options();
  train::apply_chat_recipe_defaults(imported, true, given_of({}), nlohmann::json::object());
  EXPECT_EQ(imported.optim.embedding_lr, 0.3);
  EXPECT_EQ(imported.optim.unembedding_lr, 0.004);
  EXPECT_EQ(imported.optim.matrix_lr, 0.02);
  // The classic recipe's sft and either recipe's rl keep their command's defaults.
  for (bool r2026 : {false, true}) {
    train::TrainOptions c = r2026 ? train::TrainOptions{} : sft_options(), before = c;
    c.chat.stage = before.chat.stage = r2026 ? train::RunStage::Rl : train::RunStage::Sft;
    train::apply_chat_recipe_defaults(c, r2026, given_of({}), source);
    EXPECT_EQ(c.optim.embedding_lr, before.optim.embedding_lr);
    EXPECT_EQ(c.optim.init_lr_frac, before.optim.init_lr_frac);
    EXPECT_EQ(c.optim.warmdown_ratio, before.optim.warmdown_ratio);
  }
  // train --stage sft reaches the same rules, and no chat stage takes --warmup_steps.
  train::TrainOptions t = sft_options();
  train::apply_recipe_defaults(t, true, given_of({}));
  EXPECT_EQ(t.optim.init_lr_frac, 0.8);
  EXPECT_EQ(t.optim.warmup_steps, 0);  // not base training's 40
  NANODDP_EXPECT_ERROR(train::apply_chat_recipe_defaults(t, false, given_of({"warmup_steps"}), {}), "--warmup_ratio");
}

// The plan and optimizer of a 2026 chat stage: every lr times init_lr_frac and nothing else
// (chat_sft and chat_rl do not scale with the batch), Muon's weight decay --weight_decay; the
// schedules are chat_sft's and chat_rl's.
TEST(ChatRecipe2026, ChatStagesNeitherScaleWithTheBatchNorScheduleTheWeightDecay) {
  data::DatasetMeta meta;
  meta.vocab_size = 300;
  for (train::RunStage stage : {train::RunStage::Sft, train::RunStage::Rl}) {
    train::TrainOptions o = sft_options();
    o.chat.stage = stage;
    o.model.recipe = model::Recipe::R2026;
    o.model.depth = 2;
    o.model.max_seq_len = 64;
    o.model.head_dim = 64;
    o.batch.device_batch_size = 2;
    o.batch.num_iterations = 600;
    o.rl.examples_per_step = 2;
    o.optim.weight_decay = 0.1;
    train::apply_chat_recipe_defaults(o, true, given_of({}), nlohmann::json::object());
    const train::Plan p = train::make_plan(o, meta, 1);
    const ddp::OptimizerConfig oc = train::optimizer_config(o, p);
    const double f = o.optim.init_lr_frac;  // 0.8 for sft, rl's 1 here
    EXPECT_TRUE(oc.recipe_2026);
    EXPECT_DOUBLE_EQ(oc.embedding_lr, o.optim.embedding_lr * f);
    EXPECT_DOUBLE_EQ(oc.unembedding_lr, o.optim.unembedding_lr * f);
    EXPECT_DOUBLE_EQ(oc.matrix_lr, o.optim.matrix_lr * f);
    EXPECT_DOUBLE_EQ(oc.scalar_lr, 0.5 * f);
    EXPECT_DOUBLE_EQ(oc.smear_lr, 0.2 * f);
    EXPECT_DOUBLE_EQ(oc.muon_weight_decay, 0.1);
    const bool sft = stage == train::RunStage::Sft;
    for (int64_t step : {0, 150, 300, 450, 599}) {
      const train::StepSchedule s = train::step_schedule(o, p, step);
      ASSERT_TRUE(s.muon_weight_decay.has_value());
      EXPECT_EQ(*s.muon_weight_decay, 0.1) << "step " << step;
      // chat_sft: 0.85 -> 0.95 over 300 steps; chat_rl: setup_optimizer's 0.95 throughout.
      EXPECT_DOUBLE_EQ(s.momentum, sft ? 0.85 + 0.1 * std::min(step, int64_t{300}) / 300.0 : 0.95) << "step " << step;
      // chat_sft: 1 until half way, then linearly to 0; chat_rl: 1 - step / N.
      const double lr = sft ? std::min(1.0, (600.0 - double(step)) / 300.0) : 1.0 - double(step) / 600.0;
      EXPECT_NEAR(s.lr, lr, 1e-12) << "step " << step;  // the same fractions, rounded once or twice
    }
  }
}

// A tiny 2026 base run, the toy conversations ("Pick a digit." -> "#### d") and questions (answer
// 7) of test_rl.cpp, made once per test process.
// `nanoddp train` of the tiny model on `data` for `steps` steps of 512 tokens, then `extra` flags.
Argv tiny_base(const std::string& data, const std::string& out, int steps, const Argv& extra) {
  Argv argv = {"train", "--data", data, "--out", out, "--depth", "2", "--aspect_ratio", "32", "--head_dim", "32",
               "--max_seq_len", "64", "--device_batch_size", "8", "--total_batch_size", "512", "--num_iterations",
               std::to_string(steps), "--eval_every", "-1", "--eval_tokens", "512", "--threads", "1", "--peak_flops",
               "1e9"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

struct Base2026 {
  ScratchDir dir{"chat2026_" + std::to_string(::getpid())};
  std::string base = dir.str("base"), convs = dir.str("digits.jsonl"), questions = dir.str("seven.jsonl");
  Base2026() {
    testing::make_byte_dataset(dir.str(), 200, 5);
    Proc b(nanoddp_argv(tiny_base(dir.str("data"), base, 60, {})));  // the default recipe: 2026
    EXPECT_EQ(b.wait_exit(120s), 0) << b.all();
    std::ofstream sft(convs), rl(questions);
    for (int i = 0; i < 200; i++)
      sft << nlohmann::json{{"messages", {{{"role", "user"}, {"content", "Pick a digit."}},
                                          {{"role", "assistant"}, {"content", "#### " + std::to_string(i * 7 % 10)}}}}}
                 .dump()
          << "\n";
    for (int i = 0; i < 16; i++)
      rl << R"({"messages": [{"role": "user", "content": "Pick a digit."}], "answer": "7"})" << "\n";
  }
};

const Base2026& base2026() {
  static Base2026 b;
  return b;
}

void run_ok(const Argv& argv, int ranks = 1) {
  Proc p(ranks == 1 ? nanoddp_argv(argv) : nanoddp_run_argv(ranks, {}, argv));
  ASSERT_EQ(p.wait_exit(180s), 0) << p.all();
}

// `steps` steps of 2 micro-steps of 4 rows (on 2 ranks: one each).
Argv sft(const std::string& out, const std::string& source, int steps = 4) {
  return {"sft", "--source", source, "--data", base2026().convs, "--out", out, "--device_batch_size", "4",
          "--total_batch_size", std::to_string(4 * 64 * 2), "--num_iterations", std::to_string(steps), "--threads",
          "1", "--peak_flops", "1e9", "--timeout", "30"};
}

// 8 samples of 2 questions a step. After 60 base steps and 30 SFT steps of 512 tokens, some samples
// answer 7 and most do not (by hand, the same recipe on Brown text: eval accuracy 0.14; this test's
// runs: rewards 0.06, 0.44 and 0 in its three steps), so a question's 8 samples all score alike with
// probability about 0.86^8 + 0.14^8 = 0.3, and all 6 questions of a run with about 0.3^6 = 7e-4:
// some have a gradient, which NorMuon's variance then shows.
Argv rl(const std::string& out, const std::string& source, int steps) {
  return {"rl", "--source", source, "--task", base2026().questions, "--out", out, "--num_samples", "8",
          "--examples_per_step", "2", "--num_iterations", std::to_string(steps), "--max_new_tokens", "6",
          "--init_lr_frac", "1", "--threads", "1", "--timeout", "30"};
}

// The checkpoint is of the 2026 recipe, and its optimizer state is the 2026 optimizer's: NorMuon's
// second moment of every block matrix, which the classic Muon does not have, moved by training.
void expect_2026_state(const std::string& checkpoint) {
  std::ifstream in(checkpoint + "/meta.json");
  const auto meta = nlohmann::json::parse(in);
  EXPECT_EQ(meta.at("model_config").at("recipe"), "2026") << checkpoint;
  const SafetensorsFile f(checkpoint + "/optim_rank0.safetensors");
  const std::string name = "muon.variance.transformer.h.0.attn.c_q.weight";
  ASSERT_TRUE(f.contains(name)) << checkpoint << " has no NorMuon variance";
  const Tensor v = f.read(name);
  double sum = 0;
  for (int64_t i = 0; i < v.numel(); i++) sum += v.data<float>()[i];
  EXPECT_GT(sum, 0) << name << " is all zero: no 2026 Muon step updated it";
}

std::string step_dir(const ScratchDir& run, int step) { return run.str(fmt::format("checkpoints/step_{:06d}", step)); }

TEST(ChatRecipe2026, SftTrainsThe2026OptimizerResumesBitwiseAndTwoRanksEqualOne) {
  ScratchDir one("chat2026_sft_one"), two("chat2026_sft_two"), resumed("chat2026_sft_resumed");
  const std::string& base = base2026().base;
  run_ok(sft(one.str(), base));
  expect_2026_state(step_dir(one, 4));
  run_ok(sft(two.str(), base), 2);
  EXPECT_EQ(testing::training_losses(one.str()), testing::training_losses(two.str()));
  EXPECT_EQ(testing::checkpoint_weights(step_dir(one, 4)), testing::checkpoint_weights(step_dir(two, 4)));
  auto first = sft(resumed.str(), base);
  first.insert(first.end(), {"--stop_at", "2"});
  run_ok(first);
  auto rest = sft(resumed.str(), base);
  rest.insert(rest.end(), {"--resume", "latest"});
  run_ok(rest);
  EXPECT_EQ(testing::checkpoint_weights(step_dir(one, 4)), testing::checkpoint_weights(step_dir(resumed, 4)));
  // The SFT checkpoint samples, chats and evaluates like any other.
  run_ok({"sample", "--checkpoint", one.str(), "--prompt", "the", "--max_tokens", "4"});
  run_ok({"chat", "--checkpoint", one.str(), "--prompt", "Pick a digit.", "--max_tokens", "4", "--temperature", "0"});
  Proc e(nanoddp_argv({"eval", "--checkpoint", one.str(), "--task", base2026().questions, "--num_samples", "2",
                       "--temperature", "1", "--max_tokens", "6"}));
  ASSERT_EQ(e.wait_exit(60s), 0) << e.all();
  const std::string out = e.out();
  EXPECT_EQ(nlohmann::json::parse(out.substr(out.rfind('{')))["n"], 32) << out;
}

int64_t adam_steps(const std::string& checkpoint) {
  const SafetensorsFile f(checkpoint + "/optim_rank0.safetensors");
  return f.read("adamw.step").data<int64_t>()[0];
}

Tensor saved_momentum(const std::string& checkpoint, const std::string& param) {
  return SafetensorsFile(checkpoint + "/optim_rank0.safetensors").read("muon.momentum." + param);
}

// chat_sft's --load-optimizer: sft of a 2026 base starts from the base's optimizer state. Both runs
// take their first gradient g from the same weights and rows, so Muon's buffer after one step is
// lerp(m, g, 0.15) warm and lerp(0, g, 0.15) fresh (momentum 0.85 at sft's step 0): they differ by
// exactly 0.85 m, m the base's saved buffer, up to a few f32 roundings (each at most 2^-24 of the
// magnitudes involved; bound 1e-6 of them). Adam's step count goes on from the base's 60 steps.
// Without the flag's state (--load_optimizer=false, or a source that saved none) the optimizer
// starts fresh; a classic source starts fresh by default, as the classic chat_sft did.
TEST(ChatRecipe2026, SftStartsFromTheBaseOptimizerStateAsChatSftDoes) {
  ScratchDir warm("chat2026_warm"), fresh("chat2026_fresh"), bare("chat2026_bare"), classic("chat2026_classic");
  const std::string& base = base2026().base;
  run_ok(sft(warm.str(), base, 1));
  auto no_state = sft(fresh.str(), base, 1);
  no_state.push_back("--load_optimizer=false");
  run_ok(no_state);
  EXPECT_EQ(adam_steps(step_dir(warm, 1)), 61);
  EXPECT_EQ(adam_steps(step_dir(fresh, 1)), 1);
  const std::string param = "transformer.h.1.mlp.c_fc.weight";
  const Tensor m = saved_momentum(base + "/checkpoints/step_000060", param);
  const Tensor w = saved_momentum(step_dir(warm, 1), param), f = saved_momentum(step_dir(fresh, 1), param);
  ASSERT_EQ(m.numel(), w.numel());
  double worst = 0, mass = 0;
  for (int64_t i = 0; i < m.numel(); i++) {
    const double mi = m.data<float>()[i], wi = w.data<float>()[i], fi = f.data<float>()[i];
    const double bound = 1e-6 * (std::abs(mi) + std::abs(wi) + std::abs(fi)) + 1e-30;
    worst = std::max(worst, std::abs(wi - fi - 0.85 * mi) / bound);
    mass += std::abs(mi);
  }
  EXPECT_GT(mass, 0) << "the base's momentum is all zero: the check would hold for any state";
  EXPECT_LE(worst, 1.0);

  // A source whose optimizer files are gone (weights only, as an import writes) starts fresh, saying so.
  fs::copy(base + "/checkpoints/step_000060", bare.str("src"), fs::copy_options::recursive);
  fs::remove(bare.str("src/optim_rank0.safetensors"));
  Proc p(nanoddp_argv(sft(bare.str("run"), bare.str("src"), 1)));
  ASSERT_EQ(p.wait_exit(180s), 0) << p.all();
  EXPECT_NE(p.out().find("saved no optimizer state: the optimizer starts fresh"), std::string::npos) << p.all();
  EXPECT_EQ(adam_steps(bare.str("run/checkpoints/step_000001")), 1);

  // A classic base: fresh by default, warm when asked.
  run_ok(tiny_base(base2026().dir.str("data"), classic.str("base"), 5, {"--recipe", "classic"}));
  run_ok(sft(classic.str("fresh"), classic.str("base"), 1));
  EXPECT_EQ(adam_steps(classic.str("fresh/checkpoints/step_000001")), 1);
  auto asked = sft(classic.str("warm"), classic.str("base"), 1);
  asked.push_back("--load_optimizer");
  run_ok(asked);
  EXPECT_EQ(adam_steps(classic.str("warm/checkpoints/step_000001")), 6);
}

// 2026 is train's default recipe (the shared base above gives no --recipe). A run of the classic
// recipe, the default before, resumes only when named: without the flag one line says which to give.
TEST(ChatRecipe2026, TheDefaultRecipeIs2026AndAClassicRunResumesWhenNamed) {
  const auto meta = nlohmann::json::parse(std::ifstream(base2026().base + "/checkpoints/step_000060/meta.json"));
  EXPECT_EQ(meta.at("model_config").at("recipe"), "2026") << meta.dump();
  ScratchDir run("chat2026_default");
  const std::string data = base2026().dir.str("data");
  run_ok(tiny_base(data, run.str("base"), 3, {"--recipe", "classic"}));
  Proc p(nanoddp_argv(tiny_base(data, run.str("base"), 5, {"--resume", "latest"})));
  EXPECT_EQ(p.wait_exit(180s).value_or(-1), 1) << p.all();
  EXPECT_NE(p.err().find("holds a --recipe classic model and this run is --recipe 2026: to resume, give --recipe "
                         "classic"), std::string::npos) << p.all();
  EXPECT_FALSE(fs::exists(run.str("base/checkpoints/step_000005"))) << p.all();
  run_ok(tiny_base(data, run.str("base"), 5, {"--resume", "latest", "--recipe", "classic"}));
  EXPECT_TRUE(fs::exists(run.str("base/checkpoints/step_000005")));
}

// A state that does not fit (a base trained with --optimizer adamw, fine-tuned with Muon) is one line
// naming --load_optimizer=false, before anything is written.
TEST(ChatRecipe2026, AnOptimizerStateThatDoesNotFitIsRefusedNamingTheWayOut) {
  ScratchDir run("chat2026_misfit");
  run_ok(tiny_base(base2026().dir.str("data"), run.str("base"), 3, {"--recipe", "2026", "--optimizer", "adamw"}));
  Proc p(nanoddp_argv(sft(run.str("sft"), run.str("base"), 1)));
  EXPECT_EQ(p.wait_exit(180s).value_or(-1), 1) << p.all();
  EXPECT_NE(p.err().find("--load_optimizer=false"), std::string::npos) << p.all();
  EXPECT_FALSE(fs::exists(run.str("sft/checkpoints"))) << p.all();
}

TEST(ChatRecipe2026, RlTrainsThe2026OptimizerResumesBitwiseAndTwoRanksStepLikeOne) {
  ScratchDir sft_run("chat2026_rl_sft"), one("chat2026_rl_one"), two("chat2026_rl_two"), resumed("chat2026_rl_resumed");
  run_ok(sft(sft_run.str(), base2026().base, 30));
  run_ok(rl(one.str(), sft_run.str(), 3));
  expect_2026_state(step_dir(one, 3));
  auto first = rl(resumed.str(), sft_run.str(), 3);
  first.insert(first.end(), {"--stop_at", "1"});
  run_ok(first);
  auto rest = rl(resumed.str(), sft_run.str(), 3);
  rest.insert(rest.end(), {"--resume", "latest"});
  run_ok(rest);
  EXPECT_EQ(testing::checkpoint_weights(step_dir(one, 3)), testing::checkpoint_weights(step_dir(resumed, 3)));
  EXPECT_EQ(testing::training_metric(one.str(), "reward"), testing::training_metric(resumed.str(), "reward"));
  // 2 ranks of 1 question each against 1 rank of 2: step 1 samples the same completions from the
  // same weights (one stream per question and sample), so the same rewards; the gradient is summed
  // in another order (RL's micro-batches are per question), an f32 reassociation (~1e-7 relative),
  // which Polar Express and NorMuon's normalisation can scale up along the gradient's weakest
  // directions: measured 2e-4 relative after 3 steps whose update moved the weights 9% (from the
  // warm-started SFT model of this test). So the bound is 1% of the update itself: a rank training
  // on other questions, or its gradient left out, would move the weights by a good part of the update.
  run_ok(rl(two.str(), sft_run.str(), 3), 2);
  const auto r1 = testing::training_metric(one.str(), "reward"), r2 = testing::training_metric(two.str(), "reward");
  ASSERT_EQ(r1.size(), 3u);
  std::printf("rl rewards: %.3f %.3f %.3f\n", r1.at(1), r1.at(2), r1.at(3));
  EXPECT_EQ(r1.at(1), r2.at(1));
  const auto w1 = testing::checkpoint_weights(step_dir(one, 3)), w2 = testing::checkpoint_weights(step_dir(two, 3));
  const auto w0 = testing::checkpoint_weights(step_dir(sft_run, 30));
  ASSERT_EQ(w1.size(), w2.size());
  ASSERT_EQ(w1.size(), w0.size());
  double diff = 0, moved = 0;
  for (size_t i = 0; i < w1.size(); i++) {
    diff += (double(w1[i]) - w2[i]) * (double(w1[i]) - w2[i]);
    moved += (double(w1[i]) - w0[i]) * (double(w1[i]) - w0[i]);
  }
  std::printf("2 ranks against 1: difference %.3g of the update's norm\n", std::sqrt(diff / moved));
  EXPECT_GT(moved, 0);
  EXPECT_LT(std::sqrt(diff / moved), 0.01);
}

}  // namespace
}  // namespace nanoddp
