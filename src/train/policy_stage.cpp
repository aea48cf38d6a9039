// The policy-gradient stage (RL): each step samples completions of examples_per_step questions,
// scores them and trains on the sampled tokens weighted by their advantage (train/rl.h).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/conversation.h"
#include "data/tasks.h"
#include "train/rl.h"
#include "train/stage.h"
#include "train/schedule.h"

namespace nanoddp::train {

namespace {

class PolicyStage final : public Stage {
 public:
  explicit PolicyStage(const StageContext& ctx);

  void forward_backward(float loss_scale, StepPhases& phases) override;
  LossReading read_loss() override { return {stats_.loss, 1.0}; }
  // Every rank has as many samples, so means average exactly.
  std::vector<double> step_figures() const override {
    return {stats_.reward_sum / stats_.samples, stats_.trained_tokens, stats_.sampled_tokens, stats_.sample_seconds,
            stats_.varied_questions};
  }
  double describe_step(const std::vector<double>& figures, int64_t step_after, double seconds, nlohmann::json& line,
                       std::string& console) const override;
  std::string describe_batch() const override;
  std::string describe_tokens(double /*trained_tokens*/, double seconds) const override {
    return tally_.summary(seconds);
  }
  bool counts_flops() const override { return false; }
  data::LoaderState position() const override { return questions_->state(); }
  void set_position(const data::LoaderState& s) override { questions_->set_state(s); }
  int64_t units_per_epoch() const override { return questions_->units_per_epoch(); }
  void describe_data(nlohmann::json& identity) const override {
    identity["task"] = {{"task", ctx_.opts.rl.task}, {"questions", questions_->size()}};
  }
  int64_t steps_for_epochs(double num_epochs) const override {
    const double steps =
        num_epochs * static_cast<double>(questions_->size()) / static_cast<double>(ctx_.opts.rl.examples_per_step);
    check_budget_steps(steps, fmt::format("--num_epochs {:g} over {} questions", num_epochs, questions_->size()));
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(steps)));
  }

 private:
  StageContext ctx_;
  std::unique_ptr<QuestionSource> questions_;
  RlStepStats stats_;  // of the last step, on this rank
  data::RewardRule reward_;  // --reward, resolved for the task
  // The run's tokens and the no-signal warning, updated as each step is described (from the
  // all-rank figures, the same on every rank).
  mutable RlRunTally tally_;
};

PolicyStage::PolicyStage(const StageContext& ctx) : ctx_(ctx) {
  const TrainOptions& o = ctx.opts;
  auto questions = data::load_questions(o.rl.task, o.rl.task_count, o.rl.task_seed);
  reward_ = data::resolve_reward_rule(o.rl.reward, o.rl.task, questions);
  // Every question must leave room for an answer; checked now, not when a late question is drawn
  // hours into the run (and again on every resume).
  for (size_t i = 0; i < questions.size(); i++) {
    const size_t n = data::render_for_completion(ctx.tokenizer, questions[i].conversation).size();
    NANODDP_CHECK(static_cast<int64_t>(n) < ctx.plan.config.max_seq_len, "RL question {} of --task {} is {} tokens, "
                  "not shorter than the model's context of {}: shorten or remove it", i + 1, o.rl.task, n,
                  ctx.plan.config.max_seq_len);
  }
  questions_ = std::make_unique<QuestionSource>(std::move(questions), ctx.group.rank(), ctx.group.size(), o.input.shuffle,
                                                o.input.seed, o.rl.examples_per_step);
}

void PolicyStage::forward_backward(float loss_scale, StepPhases& phases) {
  const TrainOptions& o = ctx_.opts;
  const chat::RolloutSettings sampling{.num_samples = o.rl.num_samples, .max_new_tokens = o.rl.max_new_tokens,
                                       .temperature = static_cast<float>(o.rl.temperature), .top_k = o.rl.top_k,
                                       .seed = o.input.seed, .reward = reward_};
  const RlSettings rs{.sampling = sampling, .device_batch_size = o.batch.device_batch_size, .loss_scale = loss_scale};
  Stopwatch compute;
  stats_ = rl_forward_backward(ctx_.model, ctx_.reducer, ctx_.tokenizer, *questions_, ctx_.plan.grad_accum, rs);
  phases.sample += stats_.sample_seconds;
  phases.backward += compute.seconds() - stats_.sample_seconds;  // forward and backward of the samples
}

// reward, sampled_tokens, sample_tokens_per_s, trained_tokens and sample_ms (train/metrics.h).
double PolicyStage::describe_step(const std::vector<double>& figures, int64_t /*step_after*/, double /*seconds*/,
                                  nlohmann::json& line, std::string& console) const {
  const int world = ctx_.group.size();
  const double reward = figures[0], step_tokens = figures[1] * world;
  // Sampling throughput: completion tokens over all ranks per second of generation on each.
  const double sampled = figures[2] * world, sample_tok_s = figures[3] > 0 ? sampled / figures[3] : 0;
  line.update({{"reward", reward}, {"sampled_tokens", sampled}, {"sample_tokens_per_s", sample_tok_s},
               {"trained_tokens", step_tokens}, {"sample_ms", 1000 * stats_.sample_seconds}});
  console += fmt::format(" | reward {:.4f} | sampled_tokens {:.0f} | sample_tokens_per_s {:.0f} | trained_tokens "
                         "{:.0f}", reward, sampled, sample_tok_s, step_tokens);
  // Note [no learning signal] in train/rl.h; printed above this step's line.
  if (const auto warning = tally_.add_step(reward, figures[4] * world, sampled, step_tokens))
    log::print0("warning: {}", *warning);
  return step_tokens;
}

std::string PolicyStage::describe_batch() const {
  return fmt::format("{} questions/step = {} ranks x {} questions x {} samples (of {} questions) | reward {}",
                     ctx_.opts.rl.examples_per_step, ctx_.group.size(), ctx_.plan.grad_accum, ctx_.opts.rl.num_samples,
                     questions_->size(), data::reward_rule_name(reward_));
}

}  // namespace

std::unique_ptr<Stage> make_policy_stage(const StageContext& ctx) { return std::make_unique<PolicyStage>(ctx); }

}  // namespace nanoddp::train
