// The eval loop (chat/eval_loop.h): pass@k's counting on a hand-made case, and the loop's counts on
// a fixed tiny model equal to the same answers sampled and scored one by one here.
#include <gtest/gtest.h>

#include "chat/eval_loop.h"
#include "chat/sample_streams.h"
#include "chat/stop_rule.h"
#include "chat_test_util.h"
#include "core/error.h"
#include "model/generate.h"

namespace nanoddp {
namespace {

TEST(EvalCounts, PassAtKCountsProblemsWithAnyCorrectAnswer) {
  chat::EvalCounts c;
  c.add_problem({false, true, false});  // passed, 1 correct of 3
  c.add_problem({false, false, false});
  c.add_problem({true, true, true});    // passed, 3 correct
  c.add_problem({false, false, true});  // passed, 1 correct
  EXPECT_EQ(c.correct, 5);
  EXPECT_EQ(c.answers, 12);
  EXPECT_EQ(c.passed, 3);
  EXPECT_EQ(c.problems, 4);
  EXPECT_DOUBLE_EQ(c.accuracy(), 5.0 / 12.0);
  EXPECT_DOUBLE_EQ(c.pass_at_k(), 3.0 / 4.0);
  EXPECT_EQ(chat::EvalCounts{}.pass_at_k(), 0) << "no problems: 0, not a division by zero";
}

// Six questions; the answers of questions 0 and 3 are the text of their sample 1 (so they pass with
// at least one correct answer), the others are never produced. Exact scoring.
struct EvalCase {
  std::unique_ptr<data::Tokenizer> tok = data::make_byte_tokenizer();
  std::unique_ptr<model::GPT> gpt = testing::tiny_chat_model(*tok, 7);
  chat::EvalSettings s{.num_samples = 3, .max_tokens = 6, .temperature = 1.f, .top_k = 0, .seed = 5,
                       .reward = data::RewardRule::Exact, .task = "the test"};
  std::vector<data::Question> questions;

  // What the loop must count, computed directly: answer k of question i sampled from its stream.
  std::string answer(size_t i, int64_t k) {
    model::SampleOptions so = chat::reply_options(*tok, s.max_tokens, s.temperature, s.top_k,
                                                  chat::sample_seed(s.seed, i, static_cast<uint64_t>(k), 3));
    const auto prompt = data::render_for_completion(*tok, questions[i].conversation);
    return chat::reply_text(*tok, model::generate(*gpt, prompt, so), so);
  }
  EvalCase() {
    for (int i = 0; i < 6; i++) questions.push_back(testing::question("Question " + std::to_string(i), "never\x01"));
    questions[0].answer = answer(0, 1);
    questions[3].answer = answer(3, 1);
  }
};

TEST(EvalLoop, CountsEqualTheAnswersScoredOneByOne) {
  EvalCase c;
  chat::EvalCounts direct;
  for (size_t i = 0; i < c.questions.size(); i++) {
    std::vector<bool> right;
    for (int64_t k = 0; k < 3; k++)
      right.push_back(data::answer_is_correct(c.answer(i, k), c.questions[i].answer, data::RewardRule::Exact));
    direct.add_problem(right);
  }
  int64_t tokens_seen = 0;
  const chat::EvalCounts got = chat::evaluate_problems(*c.gpt, *c.tok, c.questions, c.s, 0, 1,
                                                       [&](int64_t) { tokens_seen++; });
  EXPECT_EQ(got.correct, direct.correct);
  EXPECT_EQ(got.answers, 18);
  EXPECT_EQ(got.passed, direct.passed);
  EXPECT_EQ(got.problems, 6);
  EXPECT_GE(got.passed, 2) << "questions 0 and 3 answer with their sample 1's text";
  EXPECT_LT(got.correct, got.answers) << "the case should have wrong answers too";
  EXPECT_GE(tokens_seen, got.answers) << "on_token sees every generated id, at least one per answer";
}

// Rank r of W answers problems r, r + W, ...: the ranks' counts add up to one rank's.
TEST(EvalLoop, RanksSplitTheProblemsAndTheirCountsAddUp) {
  EvalCase c;
  const chat::EvalCounts one = chat::evaluate_problems(*c.gpt, *c.tok, c.questions, c.s, 0, 1);
  for (int world : {2, 4}) {
    chat::EvalCounts sum;
    for (int rank = 0; rank < world; rank++) {
      const chat::EvalCounts r = chat::evaluate_problems(*c.gpt, *c.tok, c.questions, c.s, rank, world);
      EXPECT_EQ(r.problems, (6 - rank + world - 1) / world) << "rank " << rank << " of " << world;
      sum.correct += r.correct;
      sum.answers += r.answers;
      sum.passed += r.passed;
      sum.problems += r.problems;
    }
    EXPECT_EQ(sum.correct, one.correct) << world;
    EXPECT_EQ(sum.answers, one.answers) << world;
    EXPECT_EQ(sum.passed, one.passed) << world;
    EXPECT_EQ(sum.problems, one.problems) << world;
  }
}

TEST(EvalLoop, APromptThatFillsTheContextIsAnErrorNamingTheQuestion) {
  EvalCase c;
  c.questions[4].conversation.messages[0].parts[0].text = std::string(80, 'x');
  try {
    chat::evaluate_problems(*c.gpt, *c.tok, c.questions, c.s, 0, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("question 5 of the test"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanoddp
