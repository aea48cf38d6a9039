#include "chat/eval_loop.h"

#include "chat/sample_streams.h"
#include "chat/stop_rule.h"
#include "core/error.h"
#include "model/generate.h"

namespace nanoddp::chat {

void EvalCounts::add_problem(const std::vector<bool>& right) {
  bool any = false;
  for (bool r : right) {
    correct += r ? 1 : 0;
    any |= r;
  }
  answers += static_cast<int64_t>(right.size());
  passed += any ? 1 : 0;
  problems += 1;
}

EvalCounts evaluate_problems(model::GPT& model, const data::Tokenizer& tok, const std::vector<data::Question>& problems,
                             const EvalSettings& s, int rank, int world,
                             const std::function<void(int64_t answers)>& on_token) {
  NANODDP_ASSERT(rank >= 0 && rank < world && s.num_samples >= 1);
  const int64_t context = model.config().max_seq_len;
  // The reply's sampling, its seed set per answer; made first, so that a tokenizer without the
  // reply's stop token fails on every rank, those without problems included.
  model::SampleOptions so = reply_options(tok, s.max_tokens, s.temperature, s.top_k, 0);
  EvalCounts counts;
  for (size_t i = static_cast<size_t>(rank); i < problems.size(); i += static_cast<size_t>(world)) {
    const auto prompt = data::render_for_completion(tok, problems[i].conversation);
    // A prompt that fills the context leaves no room for an answer: it would be scored as wrong.
    NANODDP_CHECK(static_cast<int64_t>(prompt.size()) < context,
                  "question {} of {} is {} tokens, not shorter than "
                  "the model's context of {}: shorten the task's questions",
                  i + 1, s.task, prompt.size(), context);
    std::vector<bool> right;
    for (int64_t k = 0; k < s.num_samples; k++) {
      so.seed = sample_seed(s.seed, i, static_cast<uint64_t>(k), static_cast<uint64_t>(s.num_samples));
      const auto ids = model::generate(model, prompt, so, [&](int32_t) {
        if (on_token) on_token(counts.answers + k);
      });
      right.push_back(data::answer_is_correct(reply_text(tok, ids, so), problems[i].answer, s.reward));
    }
    counts.add_problem(right);
  }
  return counts;
}

}  // namespace nanoddp::chat
