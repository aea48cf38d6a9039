// The bundled chat tasks: every item's answer is right (recomputed here independently), the same
// seed gives the same items, items render as valid conversations, and the reward rule reads the
// "#### N" line.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

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

TEST(Tasks, AdditionIsOneRightSumOfSmallNumbers) {
  std::set<std::pair<long, long>> pairs;
  for (const auto& it : make_task("addition", 1000, 4)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(it.question, m, std::regex("has (\\d+) .* gets (\\d+) more\\. How many")))
        << it.question;
    const long a = std::stol(m[1]), b = std::stol(m[2]);
    EXPECT_TRUE(a >= 1 && a <= 10 && b >= 1 && b <= 10) << it.question;
    EXPECT_EQ(it.question.find("away"), std::string::npos) << it.question;  // one step, no subtraction
    EXPECT_EQ(it.answer, std::to_string(a + b));
    EXPECT_TRUE(answer_is_correct(it.solution, it.answer)) << it.solution;
    pairs.insert({a, b});
  }
  // All 10 x 10 pairs occur in 1000 draws (a given pair is missed with chance 0.99^1000, about 4e-5;
  // the seed is fixed, so this is deterministic).
  EXPECT_EQ(pairs.size(), 100u);
  EXPECT_EQ(resolve_reward_rule(RewardRule::Auto, "addition"), RewardRule::Gsm8k);
  EXPECT_EQ(load_questions("addition", 5, 4).size(), 5u);  // eval and rl take it by name
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
    // The worked solution, read by its "####" line: a completion's intermediate numbers do not score.
    EXPECT_EQ(q["answer"], it.solution);
    const std::string reference = q["answer"];
    EXPECT_TRUE(answer_is_correct("#### " + it.answer, reference, RewardRule::Auto));
    EXPECT_FALSE(answer_is_correct(it.answer + " then\n#### x" + it.answer, reference, RewardRule::Auto));
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

// gsm8k also reads a reference that is a whole GSM8K solution by its "####" line.
TEST(Tasks, Gsm8kReadsTheReferenceSolutionsFinalAnswer) {
  const std::string solution = "Natalia sold 48/2 = 24 clips in May.\n#### 72";
  EXPECT_TRUE(answer_is_correct("48 + 24 = 72\n#### 72", solution, RewardRule::Gsm8k));
  EXPECT_FALSE(answer_is_correct("#### 24", solution, RewardRule::Gsm8k));
  EXPECT_FALSE(answer_is_correct("####", "####", RewardRule::Gsm8k));  // no final answer to reach
}

// contains: the answer as a whole number or word anywhere in the completion.
TEST(Tasks, ContainsFindsTheAnswerAsAWholeNumber) {
  const auto hit = [](const std::string& completion, const std::string& answer) {
    return answer_is_correct(completion, answer, RewardRule::Contains);
  };
  EXPECT_TRUE(hit("Ava has 12 apples now.", "12"));
  EXPECT_TRUE(hit("12", "12"));
  EXPECT_TRUE(hit("it costs $12.", "12"));      // the sentence's full stop is not a decimal point
  EXPECT_TRUE(hit("pages 3-12", "12"));         // a hyphen after a number is no sign
  EXPECT_TRUE(hit("she has 14.0 now", "14"));   // numbers as numbers
  EXPECT_TRUE(hit("about 1,000 coins", "1000"));
  EXPECT_TRUE(hit("a total of 1000", "1,000"));
  EXPECT_TRUE(hit("it is -3.50 degrees", "-3.5"));
  EXPECT_TRUE(hit("first 5, then 12, then 7", "12"));  // ", " between numbers is no thousands comma
  // Not part of a longer number or word.
  EXPECT_FALSE(hit("123 apples", "12"));
  EXPECT_FALSE(hit("a12 b", "12"));
  EXPECT_FALSE(hit("the 12th", "12"));
  EXPECT_FALSE(hit("12.5 apples", "12"));
  EXPECT_FALSE(hit("it is -12", "12"));
  EXPECT_FALSE(hit("1,120 coins", "120"));
  EXPECT_FALSE(hit("0.12", "12"));
  EXPECT_FALSE(hit("no number here", "12"));
  EXPECT_FALSE(hit("9007199254740993", "9007199254740992"));  // exact decimals, not doubles
  EXPECT_FALSE(hit("12 apples", ""));                          // an empty answer matches nothing
}

TEST(Tasks, ContainsFindsTheAnswerAsAWholeWord) {
  const auto hit = [](const std::string& completion, const std::string& answer) {
    return answer_is_correct(completion, answer, RewardRule::Contains);
  };
  EXPECT_TRUE(hit("The capital is Paris.", "Paris"));
  EXPECT_TRUE(hit("Paris", "Paris"));
  EXPECT_TRUE(hit("It is spelled c-a-t, done", "c-a-t"));
  EXPECT_TRUE(hit("(Paris)", "Paris"));
  EXPECT_FALSE(hit("Parisian food", "Paris"));
  EXPECT_FALSE(hit("aParis", "Paris"));
  EXPECT_FALSE(hit("c-a-t-s", "c-a-t"));   // a hyphen between letters joins them
  EXPECT_FALSE(hit("s-c-a-t", "c-a-t"));
  EXPECT_FALSE(hit("the capital is paris", "Paris"));  // case counts
  EXPECT_TRUE(hit("Parisian, then Paris", "Paris"));   // a later whole occurrence counts
}

TEST(Tasks, ExactComparesTheWholeTrimmedCompletion) {
  EXPECT_TRUE(answer_is_correct("  14 \n", "14", RewardRule::Exact));
  EXPECT_FALSE(answer_is_correct("14.0", "14", RewardRule::Exact));  // text, not numbers
  EXPECT_FALSE(answer_is_correct("it is 14", "14", RewardRule::Exact));
  EXPECT_FALSE(answer_is_correct("#### 14", "14", RewardRule::Exact));
  EXPECT_FALSE(answer_is_correct("", "", RewardRule::Exact));
}

// A sentence stating the answer scores under contains, never under gsm8k; a "####" line scores
// under gsm8k, and under contains only when the number appears.
TEST(Tasks, TheRulesDifferOnTheSameCompletion) {
  const std::string sentence = "Ava has 17 apples now.", marked = "5 + 12 = 17.\n#### 17";
  EXPECT_FALSE(answer_is_correct(sentence, "17", RewardRule::Gsm8k));
  EXPECT_TRUE(answer_is_correct(sentence, "17", RewardRule::Contains));
  EXPECT_TRUE(answer_is_correct(marked, "17", RewardRule::Gsm8k));
  EXPECT_TRUE(answer_is_correct(marked, "12", RewardRule::Contains));  // why gsm8k suits "####" tasks
  EXPECT_FALSE(answer_is_correct(marked, "12", RewardRule::Gsm8k));
  // auto: gsm8k where the reference holds "####", contains otherwise.
  EXPECT_TRUE(answer_is_correct(sentence, "17", RewardRule::Auto));
  EXPECT_FALSE(answer_is_correct(sentence, "x\n#### 17", RewardRule::Auto));
  EXPECT_TRUE(answer_is_correct(marked, "x\n#### 17", RewardRule::Auto));
}

TEST(Tasks, RewardRulesByNameAndTheDefaultPerTask) {
  for (const char* name : {"auto", "gsm8k", "contains", "exact"})
    EXPECT_STREQ(reward_rule_name(parse_reward_rule(name)), name);
  NANODDP_EXPECT_ERROR(parse_reward_rule("fuzzy"), "unknown --reward 'fuzzy'");
  // The bundled tasks' solutions end in "#### N": gsm8k. A file decides per answer.
  for (const std::string& task : task_names())
    EXPECT_EQ(resolve_reward_rule(RewardRule::Auto, task), RewardRule::Gsm8k) << task;
  EXPECT_EQ(resolve_reward_rule(RewardRule::Auto, "questions.jsonl"), RewardRule::Auto);
  EXPECT_EQ(resolve_reward_rule(RewardRule::Contains, "arithmetic"), RewardRule::Contains);
  EXPECT_EQ(resolve_reward_rule(RewardRule::Exact, "questions.jsonl"), RewardRule::Exact);
  // A file's answers name its rule where they agree.
  const auto questions = [](std::vector<std::string> answers) {
    std::vector<Question> out;
    for (const auto& a : answers) out.push_back({Conversation{}, a});
    return out;
  };
  EXPECT_EQ(resolve_reward_rule(RewardRule::Auto, "q.jsonl", questions({"x\n#### 1", "#### 2"})), RewardRule::Gsm8k);
  EXPECT_EQ(resolve_reward_rule(RewardRule::Auto, "q.jsonl", questions({"1", "Paris"})), RewardRule::Contains);
  EXPECT_EQ(resolve_reward_rule(RewardRule::Auto, "q.jsonl", questions({"1", "#### 2"})), RewardRule::Auto);
  EXPECT_EQ(resolve_reward_rule(RewardRule::Exact, "q.jsonl", questions({"#### 2"})), RewardRule::Exact);
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
