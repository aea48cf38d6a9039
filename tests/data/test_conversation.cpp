// Conversations rendered into ids and masks, against ids written out by hand for the byte
// tokenizer (bytes are their own ids; <|bos|> 256, <|user_start|> 257, <|user_end|> 258,
// <|assistant_start|> 259, <|assistant_end|> 260, <|python_start|> 261, <|python_end|> 262,
// <|output_start|> 263, <|output_end|> 264), and every malformed input named by file:line.
#include <gtest/gtest.h>

#include <fstream>

#include "data/conversation.h"
#include "data/conversation_loader.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

std::vector<int32_t> bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(Conversation, UserAndAssistantTurns) {
  auto tok = make_byte_tokenizer();
  auto c = parse_conversation(R"({"messages": [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "yo"}, {"role": "user", "content": "q"},
      {"role": "assistant", "content": "a"}]})", "t");
  auto r = render_conversation(*tok, c);
  EXPECT_EQ(r.ids, cat({{256, 257}, bytes("hi"), {258, 259}, bytes("yo"), {260, 257}, bytes("q"), {258, 259},
                        bytes("a"), {260}}));
  EXPECT_EQ(r.mask, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1}));
}

TEST(Conversation, SystemMessageIsMergedIntoTheFirstUserMessage) {
  auto tok = make_byte_tokenizer();
  // The bare-array form (nanochat's CustomJSON) means the same.
  auto c = parse_conversation(R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
      {"role": "assistant", "content": "a"}])", "t");
  auto r = render_conversation(*tok, c);
  EXPECT_EQ(r.ids, cat({{256, 257}, bytes("s\n\nu"), {258, 259}, bytes("a"), {260}}));
  EXPECT_EQ(r.mask, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1}));
}

TEST(Conversation, ToolCallsAreTrainedAndToolOutputIsNot) {
  auto tok = make_byte_tokenizer();
  auto c = parse_conversation(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [
      {"type": "text", "text": "a"}, {"type": "python", "text": "c"}, {"type": "python_output", "text": "o"},
      {"type": "text", "text": "b"}]}]})", "t");
  auto r = render_conversation(*tok, c);
  EXPECT_EQ(r.ids, cat({{256, 257}, bytes("x"), {258, 259}, bytes("a"), {261}, bytes("c"), {262, 263}, bytes("o"),
                        {264}, bytes("b"), {260}}));
  EXPECT_EQ(r.mask, (std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1}));
}

TEST(Conversation, TruncatedToMaxTokens) {
  auto tok = make_byte_tokenizer();
  auto c = parse_conversation(R"([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}])",
                              "t");
  auto r = render_conversation(*tok, c, 6);
  EXPECT_EQ(r.ids, cat({{256, 257}, bytes("hell")}));
  EXPECT_EQ(r.mask.size(), 6u);
}

TEST(Conversation, MalformedLinesNameFileLineAndWhat) {
  testing::ScratchDir dir("conversations");
  const std::string path = dir.str("c.jsonl");
  auto try_file = [&](const std::string& second_line) {
    std::ofstream(path) << R"([{"role": "user", "content": "ok"}, {"role": "assistant", "content": "ok"}])" << "\n"
                        << second_line << "\n";
    return read_conversations(path);
  };
  NANODDP_EXPECT_ERROR(try_file("{not json"), path + ":2", "not JSON");
  NANODDP_EXPECT_ERROR(try_file(R"([{"role": "assistant", "content": "a"}])"), path + ":2", "roles out of order",
                       "expected user");
  NANODDP_EXPECT_ERROR(try_file(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"),
                       path + ":2 message 2", "expected assistant");
  NANODDP_EXPECT_ERROR(try_file(R"([{"role": "user", "content": ""}])"), path + ":2 message 1", "empty content");
  NANODDP_EXPECT_ERROR(try_file(R"([{"role": "robot", "content": "a"}])"), "unknown role 'robot'");
  NANODDP_EXPECT_ERROR(try_file(R"({"msgs": []})"), path + ":2", "\"messages\"");
  NANODDP_EXPECT_ERROR(try_file(R"([{"role": "user", "content": [{"type": "text", "text": "a"}]}])"),
                       "must be a string");
  EXPECT_EQ(try_file("").size(), 1u);  // a blank line is skipped
  NANODDP_EXPECT_ERROR(read_conversations(dir.str("missing.jsonl")), "cannot open");
}

// A tokenizer with no special tokens at all, like gpt2's.
class PlainBytes final : public Tokenizer {
 public:
  std::string name() const override { return "plain"; }
  int32_t vocab_size() const override { return 256; }
  int32_t bos_id() const override { return 0; }
  std::vector<int32_t> encode(std::string_view t) const override { return std::vector<int32_t>(t.begin(), t.end()); }
  std::string decode(std::span<const int32_t> ids) const override { return std::string(ids.begin(), ids.end()); }
  std::vector<int32_t> token_bytes() const override { return std::vector<int32_t>(256, 1); }
  std::vector<SpecialToken> special_tokens() const override { return {}; }
};

// Conversations without an assistant turn (a questions-only file given as --data or --val_data)
// would train on nothing (loss 0) or evaluate to bpb 0: an error, unless --mask all trains on
// every token.
TEST(Conversation, FilesWithoutAssistantTokensAreRefusedUnlessMaskAll) {
  testing::ScratchDir dir("conversations_no_assistant");
  const std::string path = dir.str("q.jsonl");
  {
    std::ofstream out(path);
    for (int i = 0; i < 40; i++) out << R"([{"role": "user", "content": "what is 12 + 30? and then some"}])" << "\n";
  }
  auto tok = make_byte_tokenizer();
  const LoaderOptions lo{2, 16, 0, 1, false, 0};
  NANODDP_EXPECT_ERROR(ConversationLoader({path}, *tok, lo, false), "no assistant tokens", "--mask all");
  EXPECT_GT(ConversationLoader({path}, *tok, lo, true).units_per_epoch(), 0);
}

// Note [data order] holds for conversations too, across epochs: two ranks read, call for call, what
// one rank with two accumulation steps reads, both ending each epoch after its last whole step.
TEST(Conversation, TwoRanksReadWhatOneRankWithTwoAccumulationStepsReadsEpochAfterEpoch) {
  testing::ScratchDir dir("conversations_order");
  const std::string path = dir.str("c.jsonl");
  auto tok = make_byte_tokenizer();
  int64_t tokens = 0;
  {
    std::ofstream out(path);
    for (int i = 0; i < 25; i++) {  // 633 tokens: 19 units of 2 rows of 16
      const std::string line = R"([{"role": "user", "content": "question )" + std::to_string(i * 7) +
                               R"("}, {"role": "assistant", "content": "answer )" + std::string(i % 5, 'x') + R"("}])";
      out << line << "\n";
      tokens += static_cast<int64_t>(render_conversation(*tok, parse_conversation(line, "t")).ids.size());
    }
  }
  const int64_t b = 2, t = 16, units = (tokens - 1) / t / b;
  ASSERT_EQ(units % 2, 1) << "the test needs a unit count that two ranks do not divide";
  LoaderOptions one{b, t, 0, 1, true, 3};
  one.step_units = 2;
  ConversationLoader single({path}, *tok, one, false);
  std::vector<ConversationLoader> ranks;
  for (int r = 0; r < 2; r++) {
    LoaderOptions lo{b, t, r, 2, true, 3};
    lo.step_units = 2;
    ranks.emplace_back(std::vector<std::string>{path}, *tok, lo, false);
  }
  EXPECT_EQ(single.units_per_epoch(), units - 1);
  EXPECT_EQ(single.tokens_per_epoch(), (units - 1) * b * t);
  Tensor in = Tensor::empty({b, t}, DType::I32), tg = Tensor::empty({b, t}, DType::I32);
  auto rows = [&] {
    std::vector<int32_t> v(in.data<int32_t>(), in.data<int32_t>() + in.numel());
    v.insert(v.end(), tg.data<int32_t>(), tg.data<int32_t>() + tg.numel());
    return v;
  };
  for (int64_t step = 0; step < units + 2; step++)  // past the end of the second epoch
    for (int r = 0; r < 2; r++) {
      single.next(in, tg);
      const auto want = rows();
      ranks[r].next(in, tg);
      ASSERT_EQ(rows(), want) << "step " << step << " rank " << r;
    }
  EXPECT_EQ(single.state().epoch, 2);
}

TEST(Conversation, ATokenizerWithoutTheSpecialTokensIsAClearError) {
  PlainBytes tok;
  auto c = parse_conversation(R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])", "t");
  NANODDP_EXPECT_ERROR(render_conversation(tok, c), "tokenizer plain has no <|bos|> token");
}

}  // namespace
}  // namespace nanoddp::data
