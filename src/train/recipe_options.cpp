#include "train/recipe_options.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/options.h"

namespace nanoddp::train {

void apply_recipe_defaults(TrainOptions& o, bool recipe_2026, const std::function<bool(const std::string&)>& given) {
  if (o.chat.stage != RunStage::Base) return apply_chat_recipe_defaults(o, recipe_2026, given, nlohmann::json::object());
  if (!recipe_2026) {
    NANODDP_CHECK(!given("warmup_steps"), "--warmup_steps is the 2026 recipe's warmup; the classic recipe warms up "
                  "over --warmup_ratio of the steps: use that, or --recipe 2026");
    return;
  }
  NANODDP_CHECK(!given("warmup_ratio"), "--warmup_ratio is the classic recipe's warmup; the 2026 recipe warms up "
                "over --warmup_steps steps (default 40): use that, or --recipe classic");
  auto set = [&](auto& field, const char* name, auto value) {
    if (!given(name)) field = value;
  };
  set(o.optim.embedding_lr, "embedding_lr", 0.3);
  set(o.optim.unembedding_lr, "unembedding_lr", 0.008);
  set(o.optim.weight_decay, "weight_decay", 0.28);
  set(o.optim.warmup_steps, "warmup_steps", int64_t{40});
  set(o.optim.warmdown_ratio, "warmdown_ratio", 0.65);
  set(o.optim.final_lr_frac, "final_lr_frac", 0.05);
  set(o.batch.target_param_data_ratio, "target_param_data_ratio", 12.0);
  set(o.batch.total_batch_size, "total_batch_size", int64_t{-1});
}

void apply_chat_recipe_defaults(TrainOptions& o, bool recipe_2026, const std::function<bool(const std::string&)>& given,
                                const nlohmann::json& source_options) {
  NANODDP_CHECK(!given("warmup_steps"), "--warmup_steps is base training's warmup under --recipe 2026; the chat stages "
                "warm up over --warmup_ratio of the steps (nanochat's chat_sft): use that");
  if (!recipe_2026 || o.chat.stage != RunStage::Sft) return;
  // chat_sft inherits the base run's lrs as given to it (before the batch scaling).
  auto inherit = [&](double& field, const char* name, double fallback) {
    if (given(name)) return;
    const auto it = source_options.find(name);
    field = it != source_options.end() && it->is_number() ? it->get<double>() : fallback;
  };
  inherit(o.optim.embedding_lr, "embedding_lr", 0.3);
  inherit(o.optim.unembedding_lr, "unembedding_lr", 0.004);  // chat_sft's fallback, not base_train's 0.008
  inherit(o.optim.matrix_lr, "matrix_lr", 0.02);
  if (!given("init_lr_frac")) o.optim.init_lr_frac = 0.8;
  if (!given("warmdown_ratio")) o.optim.warmdown_ratio = 0.5;
  if (!given("final_lr_frac")) o.optim.final_lr_frac = 0.0;
}

ddp::OptimizerConfig optimizer_config_2026(const TrainOptions& o, const RecipeScaling& scaling) {
  ddp::OptimizerConfig oc;
  oc.optimizer = o.optim.optimizer;
  oc.recipe_2026 = true;
  const double f = o.optim.init_lr_frac * scaling.lr_scale;
  oc.embedding_lr = o.optim.embedding_lr * f;
  oc.unembedding_lr = o.optim.unembedding_lr * f;
  oc.matrix_lr = o.optim.matrix_lr * f;
  oc.scalar_lr = o.optim.scalar_lr * f;
  oc.adamw_matrix_lr = o.optim.adamw_matrix_lr * f;
  oc.smear_lr = 0.2 * o.optim.init_lr_frac;
  oc.muon_weight_decay = scaling.weight_decay;
  oc.grad_clip = o.optim.grad_clip;
  oc.ns_bf16 = o.optim.muon_precision == MuonPrecision::BF16;
  return oc;
}

std::string describe_recipe_scaling(const TrainOptions& o, const Plan& plan) {
  if (!plan.config.is_2026() || o.chat.stage != RunStage::Base) return {};
  const RecipeScaling& s = plan.scaling;
  std::string line = fmt::format("recipe 2026: every lr x {:.4f} = sqrt({} / {}) for the batch, Muon weight decay "
                                 "{:.4g}, warmup {} steps", s.lr_scale, s.total_batch_size, kReferenceBatchTokens,
                                 s.weight_decay, o.optim.warmup_steps);
  if (s.lr_scale < 0.5)
    line += "; at rates this small a short run learns less than --recipe classic (docs/recipe2026.md)";
  return line;
}

namespace {

ddp::OptimizerConfig classic_optimizer_config(const TrainOptions& opts) {
  ddp::OptimizerConfig oc;
  oc.optimizer = opts.optim.optimizer;
  oc.embedding_lr = opts.optim.embedding_lr * opts.optim.init_lr_frac;
  oc.unembedding_lr = opts.optim.unembedding_lr * opts.optim.init_lr_frac;
  oc.matrix_lr = opts.optim.matrix_lr * opts.optim.init_lr_frac;
  oc.adamw_matrix_lr = opts.optim.adamw_matrix_lr * opts.optim.init_lr_frac;
  oc.grad_clip = opts.optim.grad_clip;
  oc.weight_decay = opts.optim.weight_decay;
  oc.ns_bf16 = opts.optim.muon_precision == MuonPrecision::BF16;
  oc.sgd_lr = opts.optim.sgd_lr * opts.optim.init_lr_frac;
  oc.sgd_momentum = opts.optim.sgd_momentum;
  return oc;
}

}  // namespace

ddp::OptimizerConfig optimizer_config(const TrainOptions& o, const Plan& plan) {
  return plan.config.is_2026() ? optimizer_config_2026(o, plan.scaling) : classic_optimizer_config(o);
}

StepSchedule step_schedule(const TrainOptions& o, const Plan& plan, int64_t step) {
  const int64_t n = plan.num_iterations;
  const OptimOptions& op = o.optim;
  // The classic chat stages ramp Muon's momentum as base training does, where the classic chat_sft
  // and chat_rl kept 0.95: at 0.95 the main job's 80-step SFT reached 5% instead of 44%
  // (docs/benchmarks.md, "The chat stages' accuracy").
  if (!plan.config.is_2026())
    return {lr_multiplier(step, n, op.warmup_ratio, op.warmdown_ratio, op.final_lr_frac), muon_momentum(step), {}};
  if (o.chat.stage != RunStage::Base) {
    // chat_sft ramps Muon's momentum as classic base training did; chat_rl leaves it at 0.95.
    const double momentum = o.chat.stage == RunStage::Sft ? muon_momentum(step) : 0.95;
    return {lr_multiplier(step, n, op.warmup_ratio, op.warmdown_ratio, op.final_lr_frac), momentum,
            plan.scaling.weight_decay};
  }
  // nanochat's 2026 schedules: warmup in steps, Muon's momentum and weight decay.
  return {lr_multiplier_2026(step, n, op.warmup_steps, op.warmdown_ratio, op.final_lr_frac),
          muon_momentum_2026(step, n, op.warmdown_ratio), muon_weight_decay_2026(step, n, plan.scaling.weight_decay)};
}

}  // namespace nanoddp::train
