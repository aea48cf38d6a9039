// The token LM stage: base training on a dataset's shards, SFT on conversations (--conversations).
// One step is grad_accum micro-batches of device_batch_size rows; the loss is the mean
// cross-entropy of the next token where the target is trained on.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "core/trace.h"
#include "data/conversation_loader.h"
#include "ops/backend.h"
#include "train/stage.h"
#include "train/schedule.h"

namespace nanoddp::train {

namespace {

// "a.jsonl,b.jsonl" -> its items (empty ones dropped).
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

class TokenStage final : public Stage {
 public:
  explicit TokenStage(const StageContext& ctx);

  void forward_backward(float loss_scale, StepPhases& phases) override;
  LossReading read_loss() override;
  double describe_step(const std::vector<double>& figures, int64_t step_after, double seconds, nlohmann::json& line,
                       std::string& console) const override;
  std::string describe_batch() const override;
  bool counts_flops() const override { return true; }
  data::LoaderState position() const override { return loader_->state(); }
  void set_position(const data::LoaderState& s) override { loader_->set_state(s); }
  int64_t units_per_epoch() const override { return loader_->units_per_epoch(); }
  void describe_data(nlohmann::json& identity) const override {
    if (!ctx_.opts.chat.conversations.empty()) identity["conversations"] = ctx_.opts.chat.conversations;
  }
  int64_t steps_for_epochs(double num_epochs) const override {
    const double steps = num_epochs * static_cast<double>(loader_->tokens_per_epoch()) /
                         static_cast<double>(ctx_.plan.tokens_per_step);
    check_budget_steps(steps, fmt::format("--num_epochs {:g} over {} tokens", num_epochs, loader_->tokens_per_epoch()));
    const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(steps)));
    check_run_tokens(n, ctx_.plan.tokens_per_step);
    return n;
  }
  std::optional<EvalResult> evaluate_bpb() override;

 private:
  void check_step_fits(int64_t epoch_tokens) const;

  StageContext ctx_;
  std::unique_ptr<data::BatchSource> loader_;
  // The val split or validation conversations, opened once; every evaluation rewinds it to its
  // start, so that each sees the same rows. Null when nothing is evaluated.
  std::unique_ptr<data::BatchSource> val_loader_;
  // One micro-batch: i32 [device_batch_size, max_seq_len] on the host.
  Tensor inputs_, targets_;
  // The last step's per-token losses, f32 [grad_accum * device_batch_size * max_seq_len] on the
  // model's device, micro-batch after micro-batch (Note [reading the loss]), and the targets each
  // micro-batch scored (host).
  Tensor losses_;
  std::vector<int64_t> scored_;
};

TokenStage::TokenStage(const StageContext& ctx) : ctx_(ctx) {
  const TrainOptions& o = ctx.opts;
  // Rank-strided: each rank reads its own rows of the one seeded order.
  data::LoaderOptions lo{o.batch.device_batch_size, o.model.max_seq_len, ctx.group.rank(), ctx.group.size(), o.input.shuffle, o.input.seed};
  lo.vocab_size = ctx.plan.config.vocab_size;
  lo.step_units = ctx.plan.grad_accum * ctx.group.size();  // an epoch ends after a whole step (Note [data order])
  // Evaluation reads rows in order, not steps.
  data::LoaderOptions val = lo;
  val.shuffle = false;
  val.seed = 0;
  val.step_units = 0;
  if (o.chat.conversations.empty()) {
    loader_ = std::make_unique<data::TokenLoader>(o.input.data, "train", lo);
    // The val split is opened now, before any training: a split too small for one window stops the
    // run here, not after its last step with nothing saved.
    val_loader_ = std::make_unique<data::TokenLoader>(o.input.data, "val", val);
  } else {
    loader_ = std::make_unique<data::ConversationLoader>(split_list(o.chat.conversations), ctx.tokenizer, lo,
                                                         o.chat.mask == LossMask::All);
    // The validation conversations are read now as well, so that a file too small or without
    // assistant turns stops the run before it trains, not after.
    if (!o.chat.val_conversations.empty())
      val_loader_ = std::make_unique<data::ConversationLoader>(split_list(o.chat.val_conversations), ctx.tokenizer, val,
                                                               o.chat.mask == LossMask::All);
  }
  inputs_ = Tensor::empty({o.batch.device_batch_size, o.model.max_seq_len}, DType::I32);
  targets_ = Tensor::empty({o.batch.device_batch_size, o.model.max_seq_len}, DType::I32);
  losses_ = Tensor::zeros({ctx.plan.grad_accum * o.batch.device_batch_size * o.model.max_seq_len}, DType::F32,
                          ctx.model.device());
  scored_.assign(static_cast<size_t>(ctx.plan.grad_accum), 0);
  check_step_fits(loader_->tokens_per_epoch());
}

// A step larger than the training split reads it several times over. With --num_epochs that makes the
// epochs meaningless, so it is an error naming the largest batch that fits; otherwise a warning,
// once (every rank computes the same).
void TokenStage::check_step_fits(int64_t epoch_tokens) const {
  const int64_t step = ctx_.plan.tokens_per_step;
  if (step <= epoch_tokens) return;
  const TrainOptions& o = ctx_.opts;
  const int64_t per_micro = o.batch.device_batch_size * o.model.max_seq_len * ctx_.group.size();
  if (o.batch.num_epochs > 0) {
    // epoch_tokens is whole micro-steps here (data::epoch_units): the largest batch that fits.
    NANODDP_CHECK(epoch_tokens >= per_micro, "--num_epochs: the training split holds {} tokens, less than one "
                  "micro-step (device_batch_size x max_seq_len x world size = {}): lower --device_batch_size or "
                  "--max_seq_len, or use more data", epoch_tokens, per_micro);
    NANODDP_FAIL("--num_epochs with --total_batch_size {}: one step is larger than the whole training split ({} "
                 "tokens); the largest batch that fits is --total_batch_size {} (or leave it out: one micro-step of "
                 "{})", step, epoch_tokens, epoch_tokens, per_micro);
  }
  log::warn0("one step ({} tokens) is larger than the whole training split ({} tokens): each step reads the data "
             "{:.1f} times over; lower --total_batch_size or use more data", step, epoch_tokens,
             static_cast<double>(step) / static_cast<double>(epoch_tokens));
}

// grad_accum micro-steps; the gradients of the last one are synchronised during its backward.
// Micro-batch gradients of the unscaled loss are summed; the reducer divides by grad_accum (Note
// [accumulation order] in model/gpt.cpp).
//
// Note [reading the loss]: nothing in a step waits for its loss. Each micro-step's forward writes
// its per-token losses into its own rows of losses_, on the device, and the host goes on queueing
// the next micro-step (on a GPU a step waits for the device once after its micro-steps, once for
// the gradient collectives and once for the optimizer, never inside a micro-step). The loss is
// read once per step, by the loop when it logs the step (every step is logged: a console line and
// a metrics.jsonl line), after the update: read_loss() copies losses_ to the host (on a GPU, one
// copy and wait per step) and sums each micro-batch in double in row order, as
// GPT::forward_backward does, so the numbers are those of reading it micro-step by micro-step, to
// the bit. The loop checks that reading for NaN or infinity at once, so a bad loss stops the run
// before the next evaluation or checkpoint. On a GPU the forward and backward are then timed
// together (forward_ms 0, backward_ms both): splitting them would need a wait inside every
// micro-step.
void TokenStage::forward_backward(float loss_scale, StepPhases& phases) {
  const int accum = static_cast<int>(ctx_.plan.grad_accum);
  const bool cuda = ctx_.model.device().is_cuda();
  const int64_t rows = ctx_.opts.batch.device_batch_size * ctx_.opts.model.max_seq_len;
  Stopwatch all;
  double data_seconds = 0;
  for (int m = 0; m < accum; m++) {
    Stopwatch data;
    {
      trace::Scope traced("data");
      loader_->next(inputs_, targets_);
    }
    data_seconds += data.seconds();
    const bool last = m == accum - 1;
    Stopwatch compute;
    scored_[static_cast<size_t>(m)] = ctx_.model.forward_backward_deferred(
        losses_.rows(m * rows, (m + 1) * rows), inputs_, targets_, loss_scale, m > 0,
        last ? ctx_.reducer.sync_hook(accum) : nullptr);
    if (!cuda) {
      phases.forward += ctx_.model.last_forward_seconds();
      phases.backward += compute.seconds() - ctx_.model.last_forward_seconds();
    }
  }
  phases.data += data_seconds;
  if (cuda) {
    ops::backend(ctx_.model.device()).synchronize();  // once per step: the compute, apart from the collectives
    phases.backward += all.seconds() - data_seconds;
  }
}

// This rank's mean of the micro-batch means (Note [reading the loss]), over the micro-batches that
// scored a token: sum = their means over grad_accum, weight = their number over grad_accum (1, and
// the numbers of before, when all did).
Stage::LossReading TokenStage::read_loss() {
  const Tensor host = losses_.device().is_cpu() ? losses_ : losses_.copy_to(Device::cpu());
  const int64_t rows = ctx_.opts.batch.device_batch_size * ctx_.opts.model.max_seq_len;
  const float* l = host.data<float>();
  double loss = 0;
  int64_t scoring = 0;
  for (size_t m = 0; m < scored_.size(); m++) {
    if (scored_[m] == 0) continue;
    double sum = 0;
    for (int64_t i = 0; i < rows; i++) sum += l[static_cast<int64_t>(m) * rows + i];
    loss += sum / static_cast<double>(scored_[m]);
    scoring++;
  }
  const double accum = static_cast<double>(ctx_.plan.grad_accum);
  return {loss / accum, static_cast<double>(scoring) / accum};
}

// tokens, tokens_per_s, flops_per_s and mfu (train/metrics.h).
double TokenStage::describe_step(const std::vector<double>& /*figures*/, int64_t step_after, double seconds,
                                 nlohmann::json& line, std::string& console) const {
  const double step_tokens = static_cast<double>(ctx_.plan.tokens_per_step);
  const double tok_s = step_tokens / seconds;
  // Model FLOP/s per device, and MFU against the device's peak when one is known.
  const double flops_s = ctx_.plan.config.flops_per_token(ctx_.opts.model.max_seq_len) * tok_s / ctx_.group.size();
  line.update({{"tokens", step_after * ctx_.plan.tokens_per_step}, {"tokens_per_s", tok_s}, {"flops_per_s", flops_s}});
  console += fmt::format(" | tokens_per_s {:.0f} | flops_per_s {:.1f}G", tok_s, flops_s / 1e9);
  if (ctx_.peak.flops > 0) {
    line["mfu"] = flops_s / ctx_.peak.flops;
    console += fmt::format(" | mfu {:.1f}%", 100 * flops_s / ctx_.peak.flops);
  }
  return step_tokens;
}

std::string TokenStage::describe_batch() const {
  return fmt::format("{} tokens/step = {} ranks x {} rows x {} tokens x {} accumulation", ctx_.plan.tokens_per_step,
                     ctx_.group.size(), ctx_.opts.batch.device_batch_size, ctx_.opts.model.max_seq_len, ctx_.plan.grad_accum);
}

std::optional<EvalResult> TokenStage::evaluate_bpb() {
  // Chat stages evaluate on held-out conversations, only where the assistant speaks, or not at all.
  if (!val_loader_) return std::nullopt;
  val_loader_->set_state(data::LoaderState{});  // a loader starts at epoch 0, cursor 0
  return train::evaluate_bpb(ctx_.model, *val_loader_, ctx_.opts.batch.device_batch_size, ctx_.opts.model.max_seq_len,
                         ctx_.plan.eval_micro_batches, ctx_.token_bytes, ctx_.group);
}

}  // namespace

std::unique_ptr<Stage> make_token_stage(const StageContext& ctx) {
  return std::make_unique<TokenStage>(ctx);
}

}  // namespace nanoddp::train
