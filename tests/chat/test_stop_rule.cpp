// The reply's stop rule (chat/stop_rule.h, Note [reply stop]): the ids that end a reply, and what
// of a generation is the reply.
#include <gtest/gtest.h>

#include "chat/stop_rule.h"
#include "chat_test_util.h"
#include "model/generate.h"

namespace nanoddp {
namespace {

TEST(StopRule, StopsAtAssistantEndAndBosOnly) {
  const auto tok = data::make_byte_tokenizer();
  const model::SampleOptions so = chat::reply_options(*tok, 7, 0.5f, 3, 99);
  const int32_t end = tok->special_id("<|assistant_end|>"), bos = tok->bos_id();
  ASSERT_NE(end, bos);
  for (int32_t id = 0; id < tok->vocab_size(); id++) EXPECT_EQ(so.stops(id), id == end || id == bos) << "id " << id;
  EXPECT_EQ(so.max_tokens, 7);
  EXPECT_EQ(so.temperature, 0.5f);
  EXPECT_EQ(so.top_k, 3);
  EXPECT_EQ(so.seed, 99u);
}

TEST(StopRule, TheReplyLeavesOutAFinalStopIdOnly) {
  const auto tok = data::make_byte_tokenizer();
  const model::SampleOptions so = chat::reply_options(*tok, 8, 1.f, 0, 0);
  const int32_t end = tok->special_id("<|assistant_end|>");
  const std::vector<int32_t> hi = tok->encode("hi");
  std::vector<int32_t> stopped = hi;
  stopped.push_back(end);
  EXPECT_EQ(chat::reply_ids(stopped, so), hi);
  EXPECT_EQ(chat::reply_text(*tok, stopped, so), "hi");
  EXPECT_EQ(chat::reply_ids(hi, so), hi) << "a reply cut by max_tokens keeps its last id";
  EXPECT_EQ(chat::reply_ids({}, so), std::vector<int32_t>{});
  EXPECT_EQ(chat::reply_ids({end}, so), std::vector<int32_t>{});
}

// Sampled from a random model: every generation ends right after its first stop id, or runs to
// max_tokens without one; some seeds must reach each stop id for the test to mean something.
TEST(StopRule, GenerationEndsAtTheFirstStopId) {
  const auto tok = data::make_byte_tokenizer();
  auto gpt = testing::tiny_chat_model(*tok, 1);
  const int32_t end = tok->special_id("<|assistant_end|>"), bos = tok->bos_id();
  const auto prompt = data::render_for_completion(*tok, testing::question("Say something.", "").conversation);
  int ended_by_end = 0, ended_by_bos = 0;
  for (uint64_t seed = 0; seed < 300; seed++) {
    const model::SampleOptions so = chat::reply_options(*tok, 24, 1.f, 0, seed);
    const auto ids = model::generate(*gpt, prompt, so);
    ASSERT_FALSE(ids.empty());
    for (size_t i = 0; i + 1 < ids.size(); i++)
      ASSERT_FALSE(so.stops(ids[i])) << "seed " << seed << " went past a stop";
    if (!so.stops(ids.back())) {
      EXPECT_EQ(ids.size(), 24u) << "seed " << seed << " ended without a stop id before max_tokens";
      EXPECT_EQ(model::generation_end(ids, so), model::GenerationEnd::Length);
    } else {
      EXPECT_EQ(model::generation_end(ids, so), model::GenerationEnd::Stop);
    }
    ended_by_end += ids.back() == end;
    ended_by_bos += ids.back() == bos;
  }
  EXPECT_GT(ended_by_end, 0);
  EXPECT_GT(ended_by_bos, 0);
}

}  // namespace
}  // namespace nanoddp
