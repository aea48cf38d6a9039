// The bundled chat tasks: every item's answer is right (recomputed here independently), the same
// seed gives the same items, items render as valid conversations, and the reward rule reads the
// "#### N" line.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "data/conversation.h"
#include "data/tasks.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

// A small word list of our own, so the tests need no npm package.
std::string word_file(testing::ScratchDir& dir) {
  const std::string path = dir.str("words.txt");
  std::ofstream f(path);
  const char* base[] = {"apple", "banana", "cherry", "letter", "mississippi", "zoo", "keep", "abc", "moon", "tree"};
  for (int i = 0; i < 20; i++)
    for (const char* w : base) f << w << "\n";
  f << "Capital\nx\nhyphen-ated\n";  // not lower-case letters, or too short: skipped
  return path;
}

TEST(Tasks, SpellingAnswersSpellTheWord) {
  testing::ScratchDir dir("tasks_spelling");
  for (const auto& it : make_task("spelling", 50, 1, word_file(dir))) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(it.question, m, std::regex("\"([a-z]+)\""))) << it.question;
    std::string want;
    for (char c : m[1].str()) want += (want.empty() ? "" : "-") + std::string(1, c);
    EXPECT_EQ(it.answer, want);
    EXPECT_TRUE(answer_is_correct(it.solution, it.answer)) << it.solution;
  }
}

TEST(Tasks, LetterCountsAreRight) {
  testing::ScratchDir dir("tasks_letters");
  int zeros = 0;
  for (const auto& it : make_task("letters", 200, 2, word_file(dir))) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(it.question, m, std::regex("letter \"([a-z])\" appear in \"([a-z]+)\"")));
    const char c = m[1].str()[0];
    const std::string w = m[2];
    EXPECT_EQ(it.answer, std::to_string(std::count(w.begin(), w.end(), c))) << it.question;
    zeros += it.answer == "0";
    EXPECT_TRUE(answer_is_correct(it.solution, it.answer));
  }
  EXPECT_GT(zeros, 0);    // absent letters are asked about too
  EXPECT_LT(zeros, 150);  // but most questions are about letters of the word
}

TEST(Tasks, ArithmeticIsRightAndNeverNegative) {
  for (const auto& it : make_task("arithmetic", 300, 3)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(it.question, m, std::regex("has (\\d+) .* gets (\\d+) more .* away (\\d+)")));
    const long want = std::stol(m[1]) + std::stol(m[2]) - std::stol(m[3]);
    EXPECT_GE(want, 0);
    EXPECT_EQ(it.answer, std::to_string(want));
    EXPECT_TRUE(answer_is_correct(it.solution, it.answer));
  }
}

TEST(Tasks, SameSeedSameItemsAndValidConversations) {
  testing::ScratchDir dir("tasks_seed");
  const std::string words = word_file(dir);
  auto a = make_task("letters", 20, 9, words), b = make_task("letters", 20, 9, words);
  auto c = make_task("letters", 20, 10, words);
  for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i].question, b[i].question);
  int same = 0;
  for (size_t i = 0; i < a.size(); i++) same += a[i].question == c[i].question;
  EXPECT_LT(same, 20);
  auto tok = make_byte_tokenizer();
  for (const auto& it : a) {
    auto conv = parse_conversation(task_item_conversation_json(it), "t");
    auto r = render_conversation(*tok, conv);
    EXPECT_GT(std::count(r.mask.begin(), r.mask.end(), 1), 0);
    auto q = nlohmann::json::parse(task_item_question_json(it));
    EXPECT_EQ(q["answer"], it.answer);
    EXPECT_EQ(q["messages"].size(), 1u);
  }
  NANODDP_EXPECT_ERROR(make_task("poetry", 1, 1, words), "unknown task 'poetry'");
  NANODDP_EXPECT_ERROR(make_task("spelling", 1, 1, dir.str("none.txt")), "cannot read the word list");
}

TEST(Tasks, TheRewardReadsTheFinalAnswerLine) {
  EXPECT_TRUE(answer_is_correct("12 + 7 = 19. 19 - 5 = 14.\n#### 14", "14"));
  EXPECT_TRUE(answer_is_correct("so\n#### 1,000\n", "1000"));
  EXPECT_TRUE(answer_is_correct("#### 14.0", "14"));
  EXPECT_FALSE(answer_is_correct("#### 15", "14"));
  EXPECT_FALSE(answer_is_correct("the answer is 14 #### 41", "14"));  // the last #### counts
  EXPECT_TRUE(answer_is_correct("a-p-p", "a-p-p"));                   // no ####: the whole text
  EXPECT_FALSE(answer_is_correct("", "0"));
  // Only plain decimals compare as numbers. Was: strtod took "0x0", "inf" and "1e1" for 0, inf, 10.
  EXPECT_FALSE(answer_is_correct("#### 0x0", "0"));
  EXPECT_FALSE(answer_is_correct("#### 1e1", "10"));
  EXPECT_FALSE(answer_is_correct("#### inf", "INF"));
  EXPECT_FALSE(answer_is_correct("#### .", "0"));
  EXPECT_TRUE(answer_is_correct("#### -3.50", "-3.5"));
  // Digit by digit, not through a double (was: both read as 2^53, so a wrong answer scored).
  EXPECT_FALSE(answer_is_correct("#### 9007199254740993", "9007199254740992"));
  EXPECT_TRUE(answer_is_correct("#### 9,007,199,254,740,993", "9007199254740993"));
  EXPECT_TRUE(answer_is_correct("#### 007", "7"));
  EXPECT_TRUE(answer_is_correct("#### -0.0", "0"));
  EXPECT_TRUE(answer_is_correct("#### .5", "0.50"));
  EXPECT_FALSE(answer_is_correct("#### 1.05", "1.5"));
  // An empty answer matches nothing (was: an empty completion was right).
  EXPECT_FALSE(answer_is_correct("", ""));
  EXPECT_FALSE(answer_is_correct("#### .", " "));
  // Only spaces and dots trim to nothing, wherever the first dot is (was: " ." kept its dot).
  EXPECT_EQ(trim_answer(" . "), "");
  EXPECT_EQ(trim_answer("."), "");
  EXPECT_EQ(trim_answer(" 14. "), "14");
}

// A questions file whose answer is blank, or a number JSON writes with an exponent, is refused
// naming the line (was: an empty completion scored, or no completion could).
TEST(Tasks, AQuestionsFileWithAnAnswerNoCompletionCanMatchIsRefused) {
  testing::ScratchDir dir("tasks_bad_answers");
  const std::string ask = R"({"messages": [{"role": "user", "content": "how many?"}], "answer": )";
  for (const std::string answer : {R"("")", R"(" . ")", "1e20"}) {
    const std::string file = dir.str("q.jsonl");
    std::ofstream(file, std::ios::trunc) << ask << R"("7"})" << "\n" << ask << answer << "}\n";
    NANODDP_EXPECT_ERROR(read_questions(file), "q.jsonl:2");
  }
  const std::string file = dir.str("good.jsonl");
  std::ofstream(file) << ask << "12}\n" << ask << "2.5}\n";
  const auto qs = read_questions(file);
  ASSERT_EQ(qs.size(), 2u);
  EXPECT_EQ(qs[0].answer, "12");
  EXPECT_EQ(qs[1].answer, "2.5");
}

}  // namespace
}  // namespace nanoddp::data
