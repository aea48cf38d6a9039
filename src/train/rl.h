// nanochat's chat_rl step, on one rank: on-policy REINFORCE with a mean baseline and no KL term.
//
// For each of this rank's questions: sample num_samples completions and score them (chat/rollout.h:
// reward 1 when a completion reaches the reference answer); advantage A_i = reward_i - mean reward over the question's samples. The loss is
//
//   loss = (1 / Q) sum_q (1 / N_q) sum_{i in q} A_i sum_t -log p(token_it)
//
// over the sampled tokens only (the prompt is not trained on), Q = questions per rank per step,
// N_q = the question's sampled tokens. DDP then averages over ranks: every question weighs the same.
//
// Note [advantage groups]: forward_backward takes one scale per micro-batch, and -log p is the
// cross-entropy it already computes. Rows of one question with equal advantage share a scale, so
// each such group is a micro-batch with loss_scale = A * n_group / (N_q * Q); rows with A = 0 (all
// samples right, or all wrong) carry no gradient and are not run at all. With 0/1 rewards a
// question costs at most two groups: no new kernel, and no rows of padding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/rollout.h"
#include "data/conversation.h"
#include "data/loader.h"
#include "data/tasks.h"
#include "data/tokenizer.h"
#include "ddp/reducer.h"
#include "model/gpt.h"

namespace nanoddp::train {

// The run's questions, taken by the ranks in turn with the loaders' cursor rule (Note [data order]
// in data/loader.h), in a seeded order per epoch: a position is {epoch, cursor}, so RL resumes
// exactly, and world W reads step by step the questions world 1 reads.
class QuestionSource {
 public:
  // step_units: the questions one optimizer step takes over all ranks (examples_per_step), so that an
  // epoch ends after a whole step, as the loaders' (Note [data order] in data/loader.h); 0: world.
  QuestionSource(std::vector<data::Question> questions, int rank, int world, bool shuffle, uint64_t seed,
                 int64_t step_units = 0);
  // This rank's next question and its global draw number (epoch and position: seeds its samples,
  // so they do not depend on which rank draws them).
  const data::Question& next(uint64_t& draw);
  data::LoaderState state() const { return state_; }
  void set_state(const data::LoaderState& s) { state_ = s; order_epoch_ = -1; }
  int64_t size() const { return static_cast<int64_t>(questions_.size()); }
  // The questions an epoch takes, all ranks together (Note [data order]'s epoch_units).
  int64_t units_per_epoch() const { return data::epoch_units(size(), world_, step_units_); }

 private:
  std::vector<data::Question> questions_;
  int rank_, world_;
  int64_t step_units_;
  bool shuffle_;
  uint64_t seed_;
  data::LoaderState state_;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
};

struct RlSettings {
  chat::RolloutSettings sampling;  // each question's samples and how they score
  int64_t device_batch_size = 8;   // most rows per forward/backward
  // Every micro-batch's gradient is multiplied by this (fp16's dynamic loss scale; 1 otherwise).
  float loss_scale = 1.f;
};

struct RlStepStats {
  double reward_sum = 0;   // over this rank's samples
  double samples = 0;
  double loss = 0;         // this rank's policy-gradient loss
  double trained_tokens = 0;   // rows x length of the forward/backward passes (padding included; 0
                               // when no sample had an advantage: the step's one idle row trains nothing)
  double sampled_tokens = 0;   // completion tokens generated
  double sample_seconds = 0;   // time spent generating
  double varied_questions = 0;  // questions whose samples did not all score the same (they train)
};

// One optimizer step's forward and backward on this rank: `questions` questions from `source`,
// gradients synchronised through `reducer` (the caller then runs reducer.finish() and the optimizer).
// Collective through the reducer: every rank calls it once per step.
RlStepStats rl_forward_backward(model::GPT& model, ddp::Reducer& reducer, const data::Tokenizer& tok,
                                QuestionSource& source, int64_t questions, const RlSettings& s);

// A run's RL figures across steps, from each step's figures over all ranks: the tokens sampled and
// trained (the summary's counts), and a warning when RL cannot learn.
//
// Note [no learning signal]: a question whose samples all score the same has advantage 0 for every
// sample, so it adds no gradient (Note [advantage groups]). When that holds for every question of a
// step, the step trains nothing: the loss is 0 and the update is the optimizer's momentum and weight
// decay alone. One such step is ordinary (a hard batch); kQuietSteps in a row says the task is out
// of the model's reach (or solved). Why 5: at the defaults (16 questions x 16 samples) one quiet step
// already makes a success rate of 1% unlikely (all 256 samples wrong: 0.99^256 = 0.08), five make it
// about 3e-6; small test runs need the margin: 2 samples of 1 question at a 20% success rate agree
// with probability 0.68 per step, 5 steps in a row 1 time in 7 (10 steps: 1 in 47). The warning is
// printed once, so a false alarm costs one line, and waiting longer costs the user more steps.
class RlRunTally {
 public:
  static constexpr int64_t kQuietSteps = 5;
  // One step: its mean reward, and its questions with reward variance, sampled tokens and trained
  // tokens, each summed over all ranks. Returns the warning to print (once a run, from rank 0) on
  // the kQuietSteps-th consecutive step without variance.
  std::optional<std::string> add_step(double reward, double varied_questions, double sampled_tokens,
                                      double trained_tokens);
  double sampled_tokens() const { return sampled_; }
  double trained_tokens() const { return trained_; }
  // The end-of-run counts: "N tokens sampled (S/s), M trained".
  std::string summary(double seconds) const;

 private:
  double sampled_ = 0, trained_ = 0;
  int64_t quiet_ = 0;
  bool warned_ = false;
};

}  // namespace nanoddp::train
