// RL's rollout (chat/rollout.h): one question's samples, from their own streams, and their rewards.
#include <gtest/gtest.h>

#include "chat/rollout.h"
#include "chat/sample_streams.h"
#include "chat/stop_rule.h"
#include "chat_test_util.h"
#include "core/error.h"
#include "model/generate.h"

namespace nanoddp {
namespace {

chat::RolloutSettings settings() {
  return {.num_samples = 5, .max_new_tokens = 6, .temperature = 1.f, .top_k = 0, .seed = 9,
          .reward = data::RewardRule::Exact};
}

// Each sample is what generate() draws from the sample's stream (draw 4 of the run), and scores 1
// exactly when its reply is the answer: here the answer is sample 2's reply.
TEST(Rollout, SamplesComeFromTheirStreamsAndScoreByTheRule) {
  const auto tok = data::make_byte_tokenizer();
  auto gpt = testing::tiny_chat_model(*tok, 3);
  const chat::RolloutSettings s = settings();
  data::Question q = testing::question("Pick one.", "");
  const auto prompt = data::render_for_completion(*tok, q.conversation);
  std::vector<std::vector<int32_t>> direct;
  for (uint64_t i = 0; i < 5; i++) {
    model::SampleOptions so = chat::reply_options(*tok, s.max_new_tokens, s.temperature, s.top_k,
                                                  chat::sample_seed(s.seed, 4, i, 5));
    direct.push_back(model::generate(*gpt, prompt, so));
  }
  const model::SampleOptions so = chat::reply_options(*tok, 6, 1.f, 0, 0);
  q.answer = chat::reply_text(*tok, direct[2], so);

  const chat::Rollout r = chat::rollout(*gpt, *tok, q, 4, s);
  EXPECT_EQ(r.prompt, prompt);
  ASSERT_EQ(r.completions.size(), 5u);
  ASSERT_EQ(r.rewards.size(), 5u);
  int64_t tokens = 0;
  for (size_t i = 0; i < 5; i++) {
    EXPECT_EQ(r.completions[i], direct[i]) << "sample " << i;
    const bool right = data::answer_is_correct(chat::reply_text(*tok, direct[i], so), q.answer, s.reward);
    EXPECT_EQ(r.rewards[i], right ? 1.0 : 0.0) << "sample " << i;
    tokens += static_cast<int64_t>(direct[i].size());
  }
  EXPECT_EQ(r.rewards[2], 1.0);
  EXPECT_EQ(r.sampled_tokens(), tokens);
  double sum = 0;
  for (double x : r.rewards) sum += x;
  EXPECT_DOUBLE_EQ(r.mean_reward(), sum / 5);
  EXPECT_EQ(r.varied(), sum > 0 && sum < 5);
  EXPECT_GE(r.seconds, 0);
}

TEST(Rollout, ADifferentDrawSamplesDifferently) {
  const auto tok = data::make_byte_tokenizer();
  auto gpt = testing::tiny_chat_model(*tok, 3);
  const data::Question q = testing::question("Pick one.", "x");
  const chat::Rollout a = chat::rollout(*gpt, *tok, q, 0, settings()), b = chat::rollout(*gpt, *tok, q, 1, settings());
  EXPECT_EQ(a.completions, chat::rollout(*gpt, *tok, q, 0, settings()).completions) << "a draw repeats";
  EXPECT_NE(a.completions, b.completions);
}

TEST(Rollout, AllAlikeIsNotVaried) {
  chat::Rollout r;
  r.rewards = {1, 1, 1};
  EXPECT_FALSE(r.varied());
  EXPECT_DOUBLE_EQ(r.mean_reward(), 1);
  r.rewards = {0, 1, 0};
  EXPECT_TRUE(r.varied());
}

TEST(Rollout, AQuestionThatFillsTheContextIsAnError) {
  const auto tok = data::make_byte_tokenizer();
  auto gpt = testing::tiny_chat_model(*tok, 3);
  EXPECT_THROW(chat::rollout(*gpt, *tok, testing::question(std::string(80, 'x'), "x"), 0, settings()), Error);
}

}  // namespace
}  // namespace nanoddp
