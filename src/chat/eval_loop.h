// Sampled accuracy of a model on a task's problems (nanochat's chat_eval), on one rank.
//
// Each problem is answered num_samples times, answer k of problem i from its own stream (Note
// [sample streams]), and scored by the task's reward rule on the reply's text (Note [reply stop]).
// Problems are strided by rank: rank r of W answers problems r, r + W, ...; the caller sums the
// counts over the ranks, so any world size gives the same numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/conversation.h"
#include "data/tasks.h"
#include "data/tokenizer.h"
#include "model/gpt.h"

namespace nanoddp::chat {

struct EvalSettings {
  int64_t num_samples = 1;  // answers per problem: the k of pass@k
  int64_t max_tokens = 64;
  float temperature = 0;  // 0 = greedy
  int64_t top_k = 0;
  uint64_t seed = 42;
  data::RewardRule reward = data::RewardRule::Gsm8k;
  std::string task = "the task";  // named in errors
};

// What an evaluation counts; sums over ranks and runs of the same evaluation add up field by field.
struct EvalCounts {
  int64_t correct = 0;   // answers the reward rule scored 1
  int64_t answers = 0;   // answers sampled
  int64_t passed = 0;    // problems with at least one correct answer among their num_samples
  int64_t problems = 0;  // problems answered
  // One problem's answers, each right or wrong.
  void add_problem(const std::vector<bool>& right);
  double accuracy() const { return answers > 0 ? static_cast<double>(correct) / static_cast<double>(answers) : 0; }
  // pass@k as nanochat's chat_eval counts it, k = num_samples: the share of problems passed.
  double pass_at_k() const { return problems > 0 ? static_cast<double>(passed) / static_cast<double>(problems) : 0; }
};

// This rank's problems answered and counted. on_token sees every generated id with the answers
// done so far (the caller's check for a stop signal; it may throw to end the evaluation). Throws
// nanoddp::Error when a problem's prompt leaves no room in the model's context for an answer.
EvalCounts evaluate_problems(model::GPT& model, const data::Tokenizer& tok, const std::vector<data::Question>& problems,
                             const EvalSettings& s, int rank, int world,
                             const std::function<void(int64_t answers)>& on_token = {});

}  // namespace nanoddp::chat
