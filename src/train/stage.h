// A step per kind of stage, behind one interface, so that the training loop (train/trainer.cpp)
// is the same for all of them:
//   token LM (base training and SFT, train/token_stage.cpp): grad_accum micro-batches of a loader,
//     the cross-entropy of the next token;
//   policy gradient (RL, train/policy_stage.cpp): questions sampled and scored, nanochat's chat_rl
//     step (train/rl.h).
// A stage owns its data (loaders, questions) and does the forward and backward of one optimizer
// step; the loop then finishes the gradient collectives and updates, once for every stage.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/process_group.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "ddp/reducer.h"
#include "model/gpt.h"
#include "ops/profile.h"
#include "train/val_bpb.h"
#include "train/options.h"
#include "train/plan.h"
#include "train/progress.h"

namespace nanoddp::train {

// What a stage computes with; the trainer owns all of it, for the run's life.
struct StageContext {
  const TrainOptions& opts;
  dist::ProcessGroup& group;
  model::GPT& model;
  ddp::Reducer& reducer;
  const data::Tokenizer& tokenizer;
  const std::vector<int32_t>& token_bytes;  // bytes of each token id (bits per byte)
  const Plan& plan;
  ops::PeakFlops peak;  // MFU's denominator (flops 0: not reported)
};

class Stage {
 public:
  virtual ~Stage() = default;

  // The forward and backward of one optimizer step on this rank, each micro-batch's gradient
  // multiplied by loss_scale; the reducer's hook starts the gradient collectives during the last
  // backward. Adds the time it spends to `phases` (data, sample, forward, backward).
  virtual void forward_backward(float loss_scale, StepPhases& phases) = 0;
  // This rank's loss of the last forward_backward, in nats, as a weighted part of the step's mean:
  // over all ranks, loss = mean(sum) / mean(weight). weight is the share of the rank's micro-batches
  // that scored a token, so micro-batches without one (SFT rows whose targets are all masked) stay
  // out of the mean instead of counting as a loss of 0; 1 when all did.
  struct LossReading {
    double sum = 0;
    double weight = 1;
  };
  virtual LossReading read_loss() = 0;
  // Figures the ranks average after each step besides the loss (RL: reward and token counts).
  virtual std::vector<double> step_figures() const { return {}; }
  // The stage's fields of the step's metrics line and console text (train/metrics.h), from the
  // averaged figures; returns the tokens the step trained on over all ranks.
  virtual double describe_step(const std::vector<double>& figures, int64_t step_after, double seconds,
                               nlohmann::json& line, std::string& console) const = 0;
  // The run header's batch ("524288 tokens/step = ..."), and whether the step's model FLOPs are
  // known (then the header names the arithmetic and MFU's peak).
  virtual std::string describe_batch() const = 0;
  // The summary's tokens for the run ("N tokens, T tokens/s"); RL counts those sampled and trained.
  virtual std::string describe_tokens(double trained_tokens, double seconds) const {
    return fmt::format("{:.0f} tokens, {:.0f} tokens/s", trained_tokens, seconds > 0 ? trained_tokens / seconds : 0.0);
  }
  virtual bool counts_flops() const = 0;

  // The data position: what a checkpoint saves and a resume restores.
  virtual data::LoaderState position() const = 0;
  virtual void set_position(const data::LoaderState& s) = 0;
  // The units an epoch reads, all ranks together: a position's cursor never passes it.
  virtual int64_t units_per_epoch() const = 0;
  // Adds what the stage reads to a checkpoint's dataset identity (meta.json "dataset").
  virtual void describe_data(nlohmann::json& identity) const = 0;
  // The steps --num_epochs passes over the stage's data take (at least 1).
  virtual int64_t steps_for_epochs(double num_epochs) const = 0;
  // Validation loss and bits per byte on held-out data (collective), or nothing when the stage has
  // none (RL is measured by its reward; SFT without --val_conversations).
  virtual std::optional<EvalResult> evaluate_bpb() { return std::nullopt; }
};

// Base training and SFT (--conversations), and RL. Throw nanoddp::Error on data that cannot be read
// or does not fit the model.
std::unique_ptr<Stage> make_token_stage(const StageContext& ctx);
std::unique_ptr<Stage> make_policy_stage(const StageContext& ctx);

}  // namespace nanoddp::train
