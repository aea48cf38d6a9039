#include "train/rl.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "chat/rollout.h"
#include "core/error.h"

namespace nanoddp::train {

QuestionSource::QuestionSource(std::vector<data::Question> questions, int rank, int world, bool shuffle, uint64_t seed,
                               int64_t step_units)
    : questions_(std::move(questions)), rank_(rank), world_(world), step_units_(step_units), shuffle_(shuffle),
      seed_(seed) {
  NANODDP_CHECK(static_cast<int64_t>(questions_.size()) >= world, "RL has {} question(s), fewer than the {} ranks: "
                "give more questions (--task_count, or a longer --task file)", questions_.size(), world);
}

const data::Question& QuestionSource::next(uint64_t& draw) {
  const int64_t n = size();
  const int64_t unit = data::take_unit(state_, n, rank_, world_, step_units_);
  if (order_epoch_ != state_.epoch) {
    order_ = data::epoch_order(n, shuffle_, seed_, "questions", state_.epoch);
    order_epoch_ = state_.epoch;
  }
  draw = static_cast<uint64_t>(state_.epoch * n + unit);
  return questions_[order_[unit]];
}

namespace {

// One sampled completion as a training row: inputs = (prompt + completion)[:-1], targets the next
// token where it is a sampled one, -1 on the prompt.
struct Row {
  std::vector<int32_t> inputs, targets;
  int64_t valid = 0;
};

Row make_row(const std::vector<int32_t>& prompt, const std::vector<int32_t>& completion) {
  Row r;
  r.inputs = prompt;
  r.inputs.insert(r.inputs.end(), completion.begin(), completion.end());
  r.inputs.pop_back();
  r.targets.assign(r.inputs.size(), -1);
  for (size_t j = 0; j < completion.size(); j++) r.targets[prompt.size() - 1 + j] = completion[j];
  r.valid = static_cast<int64_t>(completion.size());
  return r;
}

struct MicroBatch {
  Tensor inputs, targets;  // i32 [rows, longest], host
  float loss_scale = 0;
};

// Rows padded to the longest with ignored targets (the padding's input id is never trained on).
MicroBatch pack(const std::vector<const Row*>& rows, float loss_scale) {
  size_t longest = 0;
  for (const Row* r : rows) longest = std::max(longest, r->inputs.size());
  const auto b = static_cast<int64_t>(rows.size()), t = static_cast<int64_t>(longest);
  MicroBatch mb{Tensor::empty({b, t}, DType::I32), Tensor::empty({b, t}, DType::I32), loss_scale};
  int32_t* in = mb.inputs.data<int32_t>();
  int32_t* tg = mb.targets.data<int32_t>();
  std::fill(in, in + b * t, 0);
  std::fill(tg, tg + b * t, -1);
  for (int64_t i = 0; i < b; i++) {
    std::copy(rows[i]->inputs.begin(), rows[i]->inputs.end(), in + i * t);
    std::copy(rows[i]->targets.begin(), rows[i]->targets.end(), tg + i * t);
  }
  return mb;
}

}  // namespace

RlStepStats rl_forward_backward(model::GPT& model, ddp::Reducer& reducer, const data::Tokenizer& tok,
                                QuestionSource& source, int64_t questions, const RlSettings& s) {
  RlStepStats st;
  const int32_t end = tok.special_id("<|assistant_end|>");
  std::vector<MicroBatch> batches;
  for (int64_t q = 0; q < questions; q++) {
    uint64_t draw = 0;
    const data::Question& question = source.next(draw);
    const chat::Rollout r = chat::rollout(model, tok, question, draw, s.sampling);
    st.sample_seconds += r.seconds;
    std::vector<Row> rows;
    int64_t question_tokens = 0;
    for (const auto& c : r.completions) {
      rows.push_back(make_row(r.prompt, c));
      question_tokens += rows.back().valid;
    }
    const double mean = r.mean_reward();
    st.sampled_tokens += static_cast<double>(r.sampled_tokens());
    st.reward_sum += mean * static_cast<double>(r.rewards.size());
    st.samples += static_cast<double>(r.rewards.size());
    st.varied_questions += r.varied() ? 1 : 0;
    // Note [advantage groups]: rows of equal advantage, at most device_batch_size per micro-batch.
    std::map<double, std::vector<const Row*>> groups;
    for (size_t i = 0; i < rows.size(); i++) {
      const double adv = r.rewards[i] - mean;
      if (adv != 0 && rows[i].valid > 0) groups[adv].push_back(&rows[i]);
    }
    for (const auto& [adv, members] : groups) {
      for (size_t first = 0; first < members.size(); first += static_cast<size_t>(s.device_batch_size)) {
        const std::vector<const Row*> chunk(
            members.begin() + static_cast<std::ptrdiff_t>(first),
            members.begin() + static_cast<std::ptrdiff_t>(std::min(members.size(), first + s.device_batch_size)));
        int64_t valid = 0;
        for (const Row* row : chunk) valid += row->valid;
        const double scale = adv * static_cast<double>(valid) /
                             (static_cast<double>(question_tokens) * static_cast<double>(questions));
        batches.push_back(pack(chunk, static_cast<float>(scale)));
      }
    }
  }
  // Every rank must run a backward for the reducer's collectives, even one whose samples all carry
  // zero advantage: one row of ignored targets gives a zero gradient.
  const bool idle_step = batches.empty();  // trains nothing: counted as 0 trained tokens
  if (idle_step) {
    Row idle;
    idle.inputs = {end};
    idle.targets = {-1};
    batches.push_back(pack({&idle}, 1.f));
  }
  for (size_t m = 0; m < batches.size(); m++) {
    const MicroBatch& mb = batches[m];
    const bool last = m + 1 == batches.size();
    const double mean_ce = model.forward_backward(mb.inputs, mb.targets, mb.loss_scale * s.loss_scale, m > 0,
                                                  last ? reducer.sync_hook(1) : nullptr);
    st.loss += mb.loss_scale * mean_ce;
    if (!idle_step) st.trained_tokens += static_cast<double>(mb.inputs.numel());
  }
  return st;
}

std::optional<std::string> RlRunTally::add_step(double reward, double varied_questions, double sampled_tokens,
                                                double trained_tokens) {
  sampled_ += sampled_tokens;
  trained_ += trained_tokens;
  quiet_ = varied_questions > 0 ? 0 : quiet_ + 1;
  if (quiet_ < kQuietSteps || warned_) return std::nullopt;
  warned_ = true;
  // Note [no learning signal]: all right or all wrong, with advice for the common case, all wrong.
  const std::string what = reward >= 1 ? "every sample scored 1 (the task is solved)"
                           : reward <= 0 ? "every sample scored 0" : "every question's samples scored alike";
  return fmt::format("RL is not learning: in each of the last {} steps {}, so no sample was better than another "
                     "and the steps trained nothing. Use a task the model can partly solve (check with nanoddp "
                     "eval), a higher --temperature, more --num_samples, or --reward contains if the replies state "
                     "the answer in a sentence", kQuietSteps, what);
}

std::string RlRunTally::summary(double seconds) const {
  return fmt::format("{:.0f} tokens sampled ({:.0f}/s), {:.0f} trained", sampled_, seconds > 0 ? sampled_ / seconds : 0,
                     trained_);
}

}  // namespace nanoddp::train
