// The flags whose defaults depend on the recipe, and the 2026 optimizer's settings from them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "core/error.h"
#include "model/gpt.h"
#include "train/plan.h"
#include "train/recipe_options.h"

namespace nanoddp::train {
namespace {

auto given_of(const std::set<std::string>& flags) {
  return [flags](const std::string& f) { return flags.count(f) > 0; };
}

TEST(RecipeOptions, The2026DefaultsAreNanochatsAndGivenFlagsAreKept) {
  TrainOptions o;
  o.optim.embedding_lr = 0.25;  // as if given
  apply_recipe_defaults(o, true, given_of({"embedding_lr"}));
  EXPECT_EQ(o.optim.embedding_lr, 0.25);
  EXPECT_EQ(o.optim.unembedding_lr, 0.008);
  EXPECT_EQ(o.optim.weight_decay, 0.28);
  EXPECT_EQ(o.optim.warmup_steps, 40);
  EXPECT_EQ(o.optim.warmdown_ratio, 0.65);
  EXPECT_EQ(o.optim.final_lr_frac, 0.05);
  EXPECT_EQ(o.batch.target_param_data_ratio, 12);
  EXPECT_EQ(o.batch.total_batch_size, -1);
  // The classic recipe keeps the struct's defaults.
  TrainOptions c;
  apply_recipe_defaults(c, false, given_of({}));
  EXPECT_EQ(c.optim.embedding_lr, TrainOptions{}.optim.embedding_lr);
  EXPECT_EQ(c.batch.total_batch_size, TrainOptions{}.batch.total_batch_size);
}

TEST(RecipeOptions, EachRecipeRefusesTheOthersWarmupNamingItsOwn) {
  TrainOptions o;
  try {
    apply_recipe_defaults(o, false, given_of({"warmup_steps"}));
    FAIL() << "--warmup_steps accepted by the classic recipe";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--warmup_ratio"), std::string::npos) << e.what();
  }
  try {
    apply_recipe_defaults(o, true, given_of({"warmup_ratio"}));
    FAIL() << "--warmup_ratio accepted by the 2026 recipe";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--warmup_steps"), std::string::npos) << e.what();
  }
}

TEST(RecipeOptions, OptimizerConfigScalesEveryLrButTheSmearGroups) {
  TrainOptions o;
  o.optim.init_lr_frac = 0.5;
  o.optim.embedding_lr = 0.3;
  o.optim.unembedding_lr = 0.008;
  o.optim.matrix_lr = 0.02;
  o.optim.scalar_lr = 0.4;
  RecipeScaling s;
  s.lr_scale = 2.0;
  s.weight_decay = 0.07;
  const ddp::OptimizerConfig oc = optimizer_config_2026(o, s);
  EXPECT_TRUE(oc.recipe_2026);
  EXPECT_DOUBLE_EQ(oc.embedding_lr, 0.3);
  EXPECT_DOUBLE_EQ(oc.unembedding_lr, 0.008);
  EXPECT_DOUBLE_EQ(oc.matrix_lr, 0.02);
  EXPECT_DOUBLE_EQ(oc.scalar_lr, 0.4);
  EXPECT_DOUBLE_EQ(oc.smear_lr, 0.1);  // 0.2 x init_lr_frac, not batch-scaled
  EXPECT_DOUBLE_EQ(oc.muon_weight_decay, 0.07);
}

// base_train's scaling parameters are the block matrices and lm_head: counted from the config, they
// equal the model's Matrix and LmHead parameters.
TEST(RecipeOptions, ScalingParamsAreTheBlockMatricesAndLmHead) {
  const auto c = model::GPTConfig::from_depth(3, 300, 256, 64, 64, 0, model::Recipe::R2026, "SSSL");
  model::GPT gpt(c, Device::cpu());
  int64_t want = 0;
  for (const auto& p : gpt.parameters())
    if (p.kind == model::ParamKind::Matrix || p.kind == model::ParamKind::LmHead) want += p.data.numel();
  EXPECT_EQ(scaling_params(c), want);
}

// A depth-2 2026 run of 64-token rows, one per micro-step, with the recipe's defaults.
TrainOptions tiny_2026_options() {
  TrainOptions o;
  o.model.recipe = model::Recipe::R2026;
  o.model.depth = 2;
  o.model.max_seq_len = 64;
  o.model.head_dim = 64;
  o.batch.device_batch_size = 1;
  apply_recipe_defaults(o, true, [](const std::string&) { return false; });
  return o;
}

// --recipe 2026 with --total_batch_size -1: the plan takes the scaled batch and trains on
// floor(target tokens / batch) steps.
TEST(RecipeOptions, PlanOf2026ChoosesTheBatchFromTheRatio) {
  TrainOptions o = tiny_2026_options();
  data::DatasetMeta meta;
  meta.vocab_size = 300;
  const Plan p = make_plan(o, meta, 1);
  const auto d12 = model::GPTConfig::from_depth(12, 300, 64, 64, 64, 0, model::Recipe::R2026, "SSSL");
  const RecipeScaling want = recipe_scaling_2026(scaling_params(p.config), scaling_params(d12), 12, -1, 0.28);
  EXPECT_EQ(p.tokens_per_step, want.total_batch_size);
  EXPECT_EQ(p.grad_accum, want.total_batch_size / 64);
  EXPECT_EQ(p.num_iterations, want.target_tokens / want.total_batch_size);
  EXPECT_DOUBLE_EQ(p.scaling.weight_decay, want.weight_decay);
}

// The run header's scaling line: the factor of a 16,384-token batch (sqrt(1/32) = 0.1768), the
// scaled weight decay and warmup as the plan has them, the note for factors under 0.5 only, and
// nothing for the classic recipe or a 2026 chat stage.
TEST(RecipeOptions, TheHeaderSaysTheBatchScalingOf2026BaseRuns) {
  TrainOptions o = tiny_2026_options();
  o.batch.total_batch_size = 16384;
  data::DatasetMeta meta;
  meta.vocab_size = 300;
  const Plan small = make_plan(o, meta, 1);
  const std::string line = describe_recipe_scaling(o, small);
  EXPECT_NE(line.find("every lr x 0.1768 = sqrt(16384 / 524288)"), std::string::npos) << line;
  EXPECT_NE(line.find(fmt::format("Muon weight decay {:.4g}", small.scaling.weight_decay)), std::string::npos) << line;
  EXPECT_NE(line.find("warmup 40 steps"), std::string::npos) << line;
  EXPECT_NE(line.find("--recipe classic"), std::string::npos) << line;

  o.batch.total_batch_size = 262144;  // factor sqrt(1/2) = 0.7071: no note
  const std::string big = describe_recipe_scaling(o, make_plan(o, meta, 1));
  EXPECT_NE(big.find("every lr x 0.7071"), std::string::npos) << big;
  EXPECT_EQ(big.find("--recipe classic"), std::string::npos) << big;

  TrainOptions classic;
  classic.model.recipe = model::Recipe::Classic;
  classic.model.depth = 2;
  classic.model.max_seq_len = 64;
  classic.batch.device_batch_size = 1;
  classic.batch.total_batch_size = 64;
  EXPECT_EQ(describe_recipe_scaling(classic, make_plan(classic, meta, 1)), "");
  o.chat.stage = RunStage::Sft;
  EXPECT_EQ(describe_recipe_scaling(o, make_plan(o, meta, 1)), "");
}

}  // namespace
}  // namespace nanoddp::train
