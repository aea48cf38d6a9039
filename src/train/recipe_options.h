// The flags of `nanoddp train` whose defaults differ between nanochat's classic recipe and its 2026
// one (base_train today), and the 2026 optimizer's settings from them.
//
//   flag                      classic    2026
//   embedding_lr              0.2        0.3
//   unembedding_lr            0.004      0.008
//   weight_decay              0 (AdamW)  0.28 (Muon's cautious weight decay, scaled and scheduled)
//   warmup                    --warmup_ratio 0   --warmup_steps 40
//   warmdown_ratio            0.2        0.65
//   final_lr_frac             0          0.05
//   target_param_data_ratio   20         12
//   total_batch_size          524288     -1 = chosen from the tokens:params ratio (schedule.h)
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ddp/optimizer.h"
#include "train/options.h"
#include "train/plan.h"
#include "train/schedule.h"

namespace nanoddp::train {

// With recipe_2026, sets the 2026 default of every flag above that was not given (given(name) says
// whether the user set flag --name). Each recipe's warmup is in its own unit: --warmup_steps with
// the classic recipe, or --warmup_ratio with 2026, is refused naming the other flag.
void apply_recipe_defaults(TrainOptions& o, bool recipe_2026, const std::function<bool(const std::string&)>& given);

// The chat stages (`sft`, `rl`, or `train --stage sft|rl`) of either recipe, called instead of the
// above. Both warm up over --warmup_ratio (nanochat's chat_sft; chat_rl has no warmup), so
// --warmup_steps is refused. With recipe_2026, sft takes chat_sft's settings (commit 92d63d4) for the
// flags not given: the base learning rates of the source (source_options, the options its checkpoint
// recorded; chat_sft's fallbacks 0.3 / 0.004 / 0.02 where it has none), --init_lr_frac 0.8,
// --warmdown_ratio 0.5 to 0. rl's own defaults are already chat_rl's. Neither scales with the batch (make_plan), and
// Muon's weight decay is --weight_decay, 0 by default, unscheduled (step_schedule).
void apply_chat_recipe_defaults(TrainOptions& o, bool recipe_2026, const std::function<bool(const std::string&)>& given,
                                const nlohmann::json& source_options);

// The 2026 optimizer's configuration: nanochat's AdamW groups and Muon, every lr times
// init_lr_frac and the scaling's lr_scale (the smear group's fixed 0.2 only by init_lr_frac, as
// nanochat leaves it unscaled), and Muon's weight decay the scaled one (its schedule starts there).
ddp::OptimizerConfig optimizer_config_2026(const TrainOptions& o, const RecipeScaling& scaling);

// The optimizer of this run: the classic one from the flags (every lr times init_lr_frac), or the
// 2026 one above when the plan's model is of that recipe.
ddp::OptimizerConfig optimizer_config(const TrainOptions& o, const Plan& plan);

// The run header's line for a 2026 base run: the scaling nanochat applies from the batch (every lr's
// factor sqrt(B / 2^19), Muon's weight decay) and the warmup, so that a small batch's small rates are
// seen, not guessed; with a factor below 0.5 (a batch under 2^17 tokens) it says that a short run
// learns less than the classic recipe (measured in docs/benchmarks.md). Empty for other runs.
std::string describe_recipe_scaling(const TrainOptions& o, const Plan& plan);

// What the schedules give the optimizer step after `step` steps: the lr multiplier, Muon's
// momentum, and (2026 recipe) Muon's weight decay. The 2026 recipe's chat stages follow nanochat's
// chat_sft (the classic lr shape over ratios, momentum 0.85 -> 0.95 over 300 steps) and chat_rl
// (lr 1 - step / N, momentum fixed at 0.95), with a constant weight decay.
struct StepSchedule {
  double lr = 1, momentum = 0;
  std::optional<double> muon_weight_decay;
};
StepSchedule step_schedule(const TrainOptions& o, const Plan& plan, int64_t step);

}  // namespace nanoddp::train
