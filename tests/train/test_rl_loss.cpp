// RL's loss (train/rl.h), in process: the gradient rl_forward_backward leaves for the optimizer
// against nanochat's chat_rl policy gradient written out one sample at a time, in the test:
//
//   loss = (1 / Q) sum_q (1 / N_q) sum_{i in q} (r_i - mean_q r) sum_{t in completion i} -log p(token_it)
//
// with the prompt's tokens not trained on, the completion's tokens (its final stop id included)
// trained on, and the sign that raises the rewarded samples' likelihood. What the reference shares
// with rl_forward_backward is the model's per-token cross-entropy gradient, tested on its own
// (tests/model); the masks, the advantages, the weights and their grouping into micro-batches are
// written here independently.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "chat/rollout.h"
#include "chat/stop_rule.h"
#include "comm/process_group.h"
#include "core/tensor.h"
#include "data/tokenizer.h"
#include "ddp/reducer.h"
#include "model/gpt.h"
#include "chat_test_util.h"
#include "test_util.h"
#include "train/rl.h"

namespace nanoddp {
namespace {

data::Question question(const std::string& text) {
  data::Question q;
  q.conversation.messages.push_back({"user", {{"text", text}}});
  q.conversation.where = "the test";
  q.answer = "?";
  return q;
}

// One sample's contribution to the reference gradient: -log p of each completion token given
// everything before it, times `weight`, added to the model's gradients.
void add_sample_gradient(model::GPT& gpt, const std::vector<int32_t>& prompt, const std::vector<int32_t>& completion,
                         double weight, bool first) {
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), completion.begin(), completion.end());
  const auto t = static_cast<int64_t>(seq.size()) - 1;
  Tensor inputs = Tensor::empty({1, t}, DType::I32), targets = Tensor::empty({1, t}, DType::I32);
  for (int64_t j = 0; j < t; j++) {
    inputs.data<int32_t>()[j] = seq[j];
    // Position j predicts seq[j + 1]: a completion token from j = prompt size - 1 on.
    targets.data<int32_t>()[j] = j + 1 >= static_cast<int64_t>(prompt.size()) ? seq[j + 1] : -1;
  }
  // forward_backward's loss is the mean over the row's targets: times their count, the sum.
  gpt.forward_backward(inputs, targets, static_cast<float>(weight * static_cast<double>(completion.size())), !first);
}

TEST(RlLoss, GradientIsTheAdvantageWeightedLikelihoodOfTheSampledTokensOnly) {
  const auto tok = data::make_byte_tokenizer();
  auto policy = testing::tiny_chat_model(*tok, 5), reference = testing::tiny_chat_model(*tok, 5);
  // Exact replies: each question's answer is what one of its samples says, so its rewards differ.
  const chat::RolloutSettings sampling{.num_samples = 6, .max_new_tokens = 5, .temperature = 1.f, .top_k = 0,
                                       .seed = 11, .reward = data::RewardRule::Exact};
  const model::SampleOptions so = chat::reply_options(*tok, sampling.max_new_tokens, 1.f, 0, 0);
  std::vector<data::Question> questions = {question("Pick one."), question("Pick two.")};
  for (size_t q = 0; q < questions.size(); q++) {
    const chat::Rollout r = chat::rollout(*reference, *tok, questions[q], q, sampling);  // draw q: in order
    questions[q].answer = chat::reply_text(*tok, r.completions[q + 1], so);
  }

  // The reference: every sample of both questions, one at a time.
  const double q_count = 2;
  double rewarded = 0;
  for (size_t q = 0; q < questions.size(); q++) {
    const chat::Rollout r = chat::rollout(*reference, *tok, questions[q], q, sampling);
    ASSERT_TRUE(r.varied()) << "question " << q << ": the test needs samples that score differently";
    const double tokens = static_cast<double>(r.sampled_tokens());
    for (size_t i = 0; i < r.completions.size(); i++) {
      const double advantage = r.rewards[i] - r.mean_reward();
      add_sample_gradient(*reference, r.prompt, r.completions[i], advantage / (tokens * q_count), q == 0 && i == 0);
      rewarded += r.rewards[i];
    }
  }
  ASSERT_GT(rewarded, 0);

  // rl_forward_backward, through a one-rank reducer, in micro-batches of at most 2 rows.
  auto group = dist::make_single_rank_group(Device::cpu());
  ddp::Reducer reducer(*policy, *group, {});
  train::QuestionSource source(questions, 0, 1, /*shuffle=*/false, 0, 2);
  const train::RlSettings rs{.sampling = sampling, .device_batch_size = 2};
  const train::RlStepStats st = train::rl_forward_backward(*policy, reducer, *tok, source, 2, rs);
  reducer.finish();
  EXPECT_EQ(st.samples, 12);
  EXPECT_EQ(st.varied_questions, 2);

  for (size_t k = 0; k < policy->parameters().size(); k++) {
    const auto got = testing::to_double(policy->parameters()[k].grad);
    const auto want = testing::to_double(reference->parameters()[k].grad);
    double largest = 0, diff = 0;
    for (size_t j = 0; j < want.size(); j++) {
      largest = std::max(largest, std::abs(want[j]));
      diff = std::max(diff, std::abs(got[j] - want[j]));
    }
    const std::string& name = policy->parameters()[k].name;
    EXPECT_GT(largest, 0) << name << ": no gradient at all";
    // f32 sums in another order (rows grouped two by two against one by one): a few ulps of the
    // largest entry, far below what a wrong mask, weight or sign would move (its whole size).
    EXPECT_LE(diff, 1e-5 * largest) << name;
  }
}

}  // namespace
}  // namespace nanoddp
