#include "chat/rollout.h"

#include <algorithm>

#include "chat/sample_streams.h"
#include "chat/stop_rule.h"
#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"
#include "model/generate.h"

namespace nanoddp::chat {

double Rollout::mean_reward() const {
  double sum = 0;
  for (double r : rewards) sum += r;
  return rewards.empty() ? 0 : sum / static_cast<double>(rewards.size());
}

bool Rollout::varied() const {
  return std::any_of(rewards.begin(), rewards.end(), [&](double r) { return r != rewards[0]; });
}

int64_t Rollout::sampled_tokens() const {
  int64_t n = 0;
  for (const auto& c : completions) n += static_cast<int64_t>(c.size());
  return n;
}

Rollout rollout(model::GPT& model, const data::Tokenizer& tok, const data::Question& question, uint64_t draw,
                const RolloutSettings& s) {
  Rollout r;
  r.prompt = data::render_for_completion(tok, question.conversation);
  NANODDP_CHECK(static_cast<int64_t>(r.prompt.size()) < model.config().max_seq_len,
                "an RL question is {} tokens, "
                "not shorter than the model's context of {}: shorten the task's questions",
                r.prompt.size(), model.config().max_seq_len);
  std::vector<uint64_t> seeds;
  for (int64_t i = 0; i < s.num_samples; i++)
    seeds.push_back(sample_seed(s.seed, draw, static_cast<uint64_t>(i), static_cast<uint64_t>(s.num_samples)));
  // generate_batch draws row i from seeds[i]; the options' own seed is not used.
  const model::SampleOptions so = reply_options(tok, s.max_new_tokens, s.temperature, s.top_k, 0);
  Stopwatch sw;
  {
    trace::Scope traced("sample");
    r.completions = model::generate_batch(model, r.prompt, seeds, so);
  }
  r.seconds = sw.seconds();
  for (const auto& c : r.completions)
    r.rewards.push_back(data::answer_is_correct(reply_text(tok, c, so), question.answer, s.reward) ? 1.0 : 0.0);
  return r;
}

}  // namespace nanoddp::chat
