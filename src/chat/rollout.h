// RL's rollout (nanochat's chat_rl): one question's samples and their rewards.
//
// The question's prompt runs once and num_samples completions are sampled from it, batched
// (model::generate_batch), sample i from its own stream (Note [sample streams], with the question's
// global draw number as the problem). Each completion scores 1 when its reply reaches the
// question's answer by the reward rule, else 0 (Note [reply stop]: the stop id is trained on, as
// the end of the reply, but is not part of the text scored).
#pragma once

#include <cstdint>
#include <vector>

#include "data/conversation.h"
#include "data/tasks.h"
#include "data/tokenizer.h"
#include "model/gpt.h"

namespace nanoddp::chat {

struct RolloutSettings {
  int64_t num_samples = 16;
  int64_t max_new_tokens = 256;
  float temperature = 1.0f;
  int64_t top_k = 50;
  uint64_t seed = 42;
  // How a completion scores (--reward, resolved for the task by data::resolve_reward_rule).
  data::RewardRule reward = data::RewardRule::Gsm8k;
};

struct Rollout {
  std::vector<int32_t> prompt;                    // the question rendered for completion
  std::vector<std::vector<int32_t>> completions;  // [num_samples][its length], a final stop id kept
  std::vector<double> rewards;                    // [num_samples], 0 or 1
  double seconds = 0;                             // time spent sampling

  double mean_reward() const;
  // Whether the samples did not all score the same (only then do they carry a gradient).
  bool varied() const;
  int64_t sampled_tokens() const;
};

// Samples and scores `question`, drawn as number `draw` of the run. Throws nanoddp::Error when
// its prompt leaves no room in the model's context for a completion.
Rollout rollout(model::GPT& model, const data::Tokenizer& tok, const data::Question& question, uint64_t draw,
                const RolloutSettings& s);

}  // namespace nanoddp::chat
