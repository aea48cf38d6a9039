#include "train/plan.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "train/schedule.h"

namespace nanoddp::train {

namespace {

// RL's batch is questions, not tokens: examples_per_step over all ranks; the tokens a step trains
// on depend on what is sampled. Its length is --num_iterations, or --num_epochs over the questions
// (counted once they are loaded).
Plan make_rl_plan(Plan p, const TrainOptions& o, int world) {
  NANODDP_CHECK(o.rl.examples_per_step % world == 0, "--examples_per_step {} is not a multiple of the world size {}: "
                "each rank takes the same number of questions per step", o.rl.examples_per_step, world);
  p.grad_accum = o.rl.examples_per_step / world;
  p.num_iterations = o.batch.num_iterations > 0 ? o.batch.num_iterations : -1;
  NANODDP_CHECK(p.num_iterations > 0 || o.batch.num_epochs > 0, "RL needs --num_iterations or --num_epochs");
  return p;
}

// Recipe 2026's scaling from the tokens:params ratio (RecipeScaling in schedule.h), against the same
// recipe at depth 12 with this run's other shape flags (nanochat's build_model_meta(12)).
// `total_batch_size`: the tokens of a step, or -1 for nanochat's automatic batch.
RecipeScaling scaling_2026(const model::GPTConfig& c, const TrainOptions& o, int64_t vocab_size,
                           int64_t total_batch_size) {
  const auto d12 = model::GPTConfig::from_depth(12, vocab_size, o.model.max_seq_len, o.model.aspect_ratio,
                                                o.model.head_dim, 0, model::Recipe::R2026, o.model.window_pattern);
  return recipe_scaling_2026(scaling_params(c), scaling_params(d12), o.batch.target_param_data_ratio,
                             total_batch_size, o.optim.weight_decay);
}

}  // namespace

int64_t scaling_params(const model::GPTConfig& c) {
  int64_t n = c.num_params() - c.padded_vocab() * c.n_embd;  // less wte
  if (!c.is_2026()) return n;
  for (int64_t l = 0; l < c.n_layer; l++)
    if (c.has_value_embedding(l)) n -= c.padded_vocab() * c.kv_dim();  // less the value embeddings
  // less the per-layer scalars, the smear gate and the smear and backout scalars
  return n - (2 * c.n_layer + model::GPTConfig::kSmearGateChannels + 2);
}

Plan make_plan(const TrainOptions& o, const data::DatasetMeta& meta, int world) {
  Plan p;
  p.config = model::GPTConfig::from_depth(o.model.depth, meta.vocab_size, o.model.max_seq_len, o.model.aspect_ratio, o.model.head_dim,
                                          o.model.n_kv_head, o.model.recipe, o.model.window_pattern);
  // The 2026 chat stages scale nothing with the batch (chat_sft, chat_rl): lrs as given, Muon's
  // weight decay --weight_decay.
  if (p.config.is_2026()) p.scaling.weight_decay = o.optim.weight_decay;
  if (o.chat.stage == RunStage::Rl) return make_rl_plan(p, o, world);
  // Tokens of one micro-step over all ranks.
  const int64_t per_micro = o.batch.device_batch_size * o.model.max_seq_len * world;
  int64_t total = o.batch.total_batch_size < 0 ? per_micro : o.batch.total_batch_size;
  if (p.config.is_2026() && o.chat.stage == RunStage::Base) {
    // -1 is nanochat's automatic batch, except with --num_epochs, where a step is one micro-step
    // as in the classic recipe (an epoch is then a pass in steps of what each rank reads).
    const bool one_micro_step = o.batch.total_batch_size < 0 && o.batch.num_epochs > 0;
    p.scaling = scaling_2026(p.config, o, meta.vocab_size, one_micro_step ? per_micro : o.batch.total_batch_size);
    total = p.scaling.total_batch_size;  // chosen by the scaling when --total_batch_size is -1
  }
  NANODDP_CHECK(total % per_micro == 0, "--total_batch_size {} is not a multiple of device_batch_size x max_seq_len x "
                "world size = {} x {} x {} = {}: choose a total batch that divides, or another device batch", total,
                o.batch.device_batch_size, o.model.max_seq_len, world, per_micro);
  p.grad_accum = total / per_micro;
  p.tokens_per_step = total;
  // The length of training, first that applies (as in nanochat): --num_iterations, --num_epochs,
  // --target_flops, then tokens = target_param_data_ratio x parameters.
  if (o.batch.num_iterations > 0) {
    p.num_iterations = o.batch.num_iterations;
  } else if (o.batch.num_epochs > 0) {
    p.num_iterations = -1;  // the trainer counts the epoch's tokens once its loader exists
  } else if (o.batch.target_flops > 0) {
    const double steps = o.batch.target_flops /
                         (p.config.flops_per_token(o.model.max_seq_len) * static_cast<double>(total));
    check_budget_steps(steps, fmt::format("--target_flops {:g}", o.batch.target_flops));
    p.num_iterations = std::llround(steps);
  } else if (p.config.is_2026() && o.chat.stage == RunStage::Base) {
    p.num_iterations = p.scaling.target_tokens / total;  // base_train: target_tokens // total_batch_size
  } else {
    const double steps =
        o.batch.target_param_data_ratio * static_cast<double>(p.config.num_params()) / static_cast<double>(total);
    check_budget_steps(steps, fmt::format("--target_param_data_ratio {:g}", o.batch.target_param_data_ratio));
    p.num_iterations = static_cast<int64_t>(steps);
  }
  check_run_tokens(p.num_iterations, total);
  if (p.num_iterations < 1 && o.batch.num_epochs <= 0) {
    // Say why: the budget given is smaller than one step.
    const double step_flops = p.config.flops_per_token(o.model.max_seq_len) * static_cast<double>(total);
    NANODDP_CHECK(o.batch.target_flops <= 0,
                  "the run would take 0 steps: --target_flops {:g} is less than half of one step, "
                  "which costs {:.3g} FLOPs ({:.3g} per token x {} tokens per step); raise it or set --num_iterations",
                  o.batch.target_flops, step_flops, p.config.flops_per_token(o.model.max_seq_len), total);
    NANODDP_FAIL("the run would take 0 steps: --target_param_data_ratio {:g} x {} parameters is fewer tokens than one "
                 "step ({}); raise it or set --num_iterations", o.batch.target_param_data_ratio, p.config.num_params(),
                 total);
  }
  // --eval_tokens counts over all ranks, like per_micro.
  p.eval_micro_batches = std::max<int64_t>(1, o.eval.eval_tokens / per_micro);
  return p;
}

}  // namespace nanoddp::train
