#include "data/tasks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "data/tokenizer_file.h"

namespace nanoddp::data {

namespace {

// Lower-case words of 3-10 letters: long enough to spell, short enough for a small model's context.
std::vector<std::string> load_words(const std::string& file) {
  const std::string path = file.empty() ? npm_package_dir("word-list") + "/words.txt" : file;
  std::ifstream in(path);
  NANODDP_CHECK(in.good(), "cannot read the word list {}: run scripts/setup.sh (it installs the npm package "
                "word-list)", path);
  std::vector<std::string> words;
  for (std::string w; std::getline(in, w);) {
    if (w.size() < 3 || w.size() > 10) continue;
    if (std::all_of(w.begin(), w.end(), [](unsigned char c) { return c >= 'a' && c <= 'z'; })) words.push_back(w);
  }
  NANODDP_CHECK(words.size() >= 100, "the word list {} holds {} usable words (lower-case, 3-10 letters)", path,
                words.size());
  return words;
}

std::string spelled(const std::string& w) {
  std::string s;
  for (size_t i = 0; i < w.size(); i++) s += (i ? "-" : "") + std::string(1, w[i]);
  return s;
}

int64_t pick(Rng& rng, int64_t n) { return static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(n)); }

TaskItem spelling(Rng& rng, const std::vector<std::string>& words) {
  const std::string& w = words[pick(rng, words.size())];
  const std::string s = spelled(w);
  return {fmt::format("Spell the word \"{}\" letter by letter.", w), fmt::format("{}\n#### {}", s, s), s};
}

TaskItem letters(Rng& rng, const std::vector<std::string>& words) {
  const std::string& w = words[pick(rng, words.size())];
  // Half the time a letter of the word, else any letter (answers of 0 are part of the task).
  const char c = pick(rng, 2) == 0 ? w[pick(rng, w.size())] : static_cast<char>('a' + pick(rng, 26));
  const int64_t n = std::count(w.begin(), w.end(), c);
  return {fmt::format("How many times does the letter \"{}\" appear in \"{}\"?", c, w),
          fmt::format("{} is spelled {}. The letter {} appears {} time{}.\n#### {}", w, spelled(w), c, n,
                      n == 1 ? "" : "s", n),
          std::to_string(n)};
}

const char* const kNames[] = {"Ava", "Ben", "Chloe", "Dan", "Emma", "Finn", "Grace", "Hugo", "Iris", "Jack"};
const char* const kThings[] = {"apples", "books", "coins", "marbles", "pencils", "stamps", "shells", "cards"};

TaskItem arithmetic(Rng& rng) {
  const std::string name = kNames[pick(rng, 10)], thing = kThings[pick(rng, 8)];
  const int64_t a = 5 + pick(rng, 46), b = 2 + pick(rng, 30), c = 1 + pick(rng, a + b);  // never below zero
  const int64_t mid = a + b, end = mid - c;
  return {fmt::format("{} has {} {}. {} gets {} more and then gives away {}. How many {} does {} have now?", name, a,
                      thing, name, b, c, thing, name),
          fmt::format("{} + {} = {}. {} - {} = {}.\n#### {}", a, b, mid, mid, c, end, end), std::to_string(end)};
}

// One addition of numbers 1-10 (100 sums to learn), the first step of "arithmetic": a task a
// depth-4 model learns on a CPU within minutes of SFT, and then improves on with RL.
TaskItem addition(Rng& rng) {
  const std::string name = kNames[pick(rng, 10)], thing = kThings[pick(rng, 8)];
  const int64_t a = 1 + pick(rng, 10), b = 1 + pick(rng, 10), sum = a + b;
  return {fmt::format("{} has {} {}. {} gets {} more. How many {} does {} have now?", name, a, thing, name, b, thing,
                      name),
          fmt::format("{} + {} = {}.\n#### {}", a, b, sum, sum), std::to_string(sum)};
}

// A plain decimal (an optional '-', digits, at most one '.', commas anywhere) written one way:
// no commas, no leading zeros, no trailing fractional zeros or '.', and no "-0"; nullopt otherwise.
std::optional<std::string> canonical_decimal(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) s.erase(0, 1);
  const size_t dot = s.find('.');
  std::string whole = s.substr(0, dot), frac = dot == std::string::npos ? "" : s.substr(dot + 1);
  const auto digits = [](const std::string& t) {
    return std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(whole) || !digits(frac) || whole.size() + frac.size() == 0) return std::nullopt;
  whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
  frac.erase(frac.find_last_not_of('0') + 1);
  std::string out = (whole.empty() ? "0" : whole) + (frac.empty() ? "" : "." + frac);
  return negative && out != "0" ? "-" + out : out;
}

}  // namespace

std::vector<std::string> task_names() { return {"spelling", "letters", "arithmetic", "addition"}; }

std::vector<TaskItem> make_task(const std::string& name, int64_t count, uint64_t seed, const std::string& words_file) {
  const auto names = task_names();
  NANODDP_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "unknown task '{}' (spelling, letters, "
                "arithmetic or addition)", name);
  // The items are made in memory, a few hundred bytes each: 2^24 of them are already gigabytes.
  constexpr int64_t kMaxItems = int64_t{1} << 24;
  NANODDP_CHECK(count >= 1 && count <= kMaxItems, "--count must be between 1 and {} (got {})", kMaxItems, count);
  std::vector<std::string> words;
  if (name == "spelling" || name == "letters") words = load_words(words_file);
  Rng rng(seed, stream_id(name));
  std::vector<TaskItem> items;
  items.reserve(count);
  for (int64_t i = 0; i < count; i++)
    items.push_back(name == "spelling"  ? spelling(rng, words)
                    : name == "letters" ? letters(rng, words)
                    : name == "addition" ? addition(rng)
                                         : arithmetic(rng));
  return items;
}

std::string task_item_conversation_json(const TaskItem& item) {
  return nlohmann::json{{"messages", {{{"role", "user"}, {"content", item.question}},
                                      {{"role", "assistant"}, {"content", item.solution}}}}}
      .dump();
}

std::string task_item_question_json(const TaskItem& item) {
  // The worked solution, as GSM8K's files give it: its "####" line makes --reward auto read the
  // final answer (gsm8k) rather than look for the number anywhere (contains), where an intermediate
  // result equal to the answer would score.
  return nlohmann::json{{"messages", {{{"role", "user"}, {"content", item.question}}}}, {"answer", item.solution}}
      .dump();
}

namespace {

// The final answer of a GSM8K-style text: after its last "####" up to the line's end, trimmed; the
// whole trimmed text when it has none.
std::string final_answer(const std::string& text) {
  const size_t mark = text.rfind("####");
  std::string got = trim_answer(mark == std::string::npos ? text : text.substr(mark + 4));
  const size_t line = got.find('\n');
  if (line != std::string::npos) got = trim_answer(got.substr(0, line));
  return got;
}

// Equal as text, or as numbers: "14.0" and "14", "1,000" and "1000" (commas dropped, as nanochat's
// GSM8K does). Only plain decimals, compared digit by digit once written the one way: through a
// double (strtod), 9007199254740993 equalled 9007199254740992, and strtod also took "0x0", "inf", "1e1".
bool same_answer(const std::string& got, const std::string& want) {
  if (got == want) return true;
  const std::optional<std::string> g = canonical_decimal(got), w = canonical_decimal(want);
  return g && w && *g == *w;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The numbers written in `text`, each a maximal run: an optional '-' (a sign when no word character
// precedes it), digits with single commas between digits, then '.' and digits. A run touching a
// letter ("a12", "12th") is part of a word and left out; "1,120" is one number, "3-12" is 3 and 12.
std::vector<std::string> numbers_in(const std::string& t) {
  std::vector<std::string> out;
  const size_t n = t.size();
  const auto digit_at = [&](size_t k) { return k < n && is_digit(t[k]); };
  for (size_t i = 0; i < n;) {
    const bool after_number = i > 0 && (word_char(t[i - 1]) || ((t[i - 1] == '.' || t[i - 1] == ',') &&
                                                               i > 1 && is_digit(t[i - 2])));
    const bool starts = digit_at(i) || (t[i] == '.' && digit_at(i + 1)) ||
                        (t[i] == '-' && (digit_at(i + 1) || (i + 2 < n && t[i + 1] == '.' && digit_at(i + 2))));
    if (!starts || after_number) {
      i++;
      continue;
    }
    size_t j = t[i] == '-' ? i + 1 : i;
    while (digit_at(j) || (t[j] == ',' && j > i && is_digit(t[j - 1]) && digit_at(j + 1))) j++;
    if (j < n && t[j] == '.' && digit_at(j + 1))
      for (j++; digit_at(j);) j++;
    const bool in_word = (i > 0 && word_char(t[i - 1])) || (j < n && word_char(t[j]));
    if (!in_word) out.push_back(t.substr(i, j - i));
    i = j;
  }
  return out;
}

// `want` in `text` as a whole word: no word character joined to either end (a hyphen between word
// characters joins them: "c-a-t" is not in "c-a-t-s").
bool contains_word(const std::string& text, const std::string& want) {
  const size_t n = text.size();
  for (size_t at = text.find(want); at != std::string::npos; at = text.find(want, at + 1)) {
    const size_t after = at + want.size();
    const bool joined_before = at > 0 && word_char(want.front()) &&
                               (word_char(text[at - 1]) || (text[at - 1] == '-' && at > 1 && word_char(text[at - 2])));
    const bool joined_after = after < n && word_char(want.back()) &&
                              (word_char(text[after]) || (text[after] == '-' && after + 1 < n &&
                                                          word_char(text[after + 1])));
    if (!joined_before && !joined_after) return true;
  }
  return false;
}

bool contains_answer(const std::string& completion, const std::string& want) {
  if (const std::optional<std::string> w = canonical_decimal(want)) {
    for (const std::string& number : numbers_in(completion))
      if (canonical_decimal(number) == w) return true;
    return false;
  }
  return contains_word(completion, want);
}

}  // namespace

RewardRule parse_reward_rule(const std::string& name) {
  for (RewardRule r : {RewardRule::Auto, RewardRule::Gsm8k, RewardRule::Contains, RewardRule::Exact})
    if (name == reward_rule_name(r)) return r;
  NANODDP_FAIL("unknown --reward '{}': auto (gsm8k where answers use \"####\", else contains), gsm8k, contains or "
               "exact", name);
}

const char* reward_rule_name(RewardRule rule) {
  switch (rule) {
    case RewardRule::Auto: return "auto";
    case RewardRule::Gsm8k: return "gsm8k";
    case RewardRule::Contains: return "contains";
    case RewardRule::Exact: return "exact";
  }
  return "?";
}

RewardRule resolve_reward_rule(RewardRule asked, const std::string& task) {
  if (asked != RewardRule::Auto) return asked;
  const auto names = task_names();
  const bool bundled = std::find(names.begin(), names.end(), task) != names.end() && !std::filesystem::exists(task);
  return bundled ? RewardRule::Gsm8k : RewardRule::Auto;
}

RewardRule resolve_reward_rule(RewardRule asked, const std::string& task, const std::vector<Question>& questions) {
  const RewardRule rule = resolve_reward_rule(asked, task);
  if (rule != RewardRule::Auto || questions.empty()) return rule;
  const auto marked = std::count_if(questions.begin(), questions.end(),
                                    [](const Question& q) { return q.answer.find("####") != std::string::npos; });
  if (marked == static_cast<std::ptrdiff_t>(questions.size())) return RewardRule::Gsm8k;
  return marked == 0 ? RewardRule::Contains : RewardRule::Auto;
}

bool answer_is_correct(const std::string& completion, const std::string& answer, RewardRule rule) {
  if (trim_answer(answer).empty()) return false;  // nothing to match (read_questions refuses such answers)
  if (rule == RewardRule::Auto)
    rule = answer.find("####") != std::string::npos ? RewardRule::Gsm8k : RewardRule::Contains;
  switch (rule) {
    case RewardRule::Exact: return trim_answer(completion) == trim_answer(answer);
    case RewardRule::Contains: return contains_answer(completion, trim_answer(answer));
    default: {
      const std::string want = final_answer(answer);
      return !want.empty() && same_answer(final_answer(completion), want);
    }
  }
}

std::vector<Question> load_questions(const std::string& file_or_name, int64_t count, uint64_t seed) {
  if (std::filesystem::exists(file_or_name)) return read_questions(file_or_name);
  // A bundled task's name has neither a '/' nor a '.': anything with one was meant as a file.
  NANODDP_CHECK(file_or_name.find_first_of("/.") == std::string::npos,
                "the questions file {} does not exist: check the path (or name a built-in task: spelling, letters, "
                "arithmetic or addition)", file_or_name);
  std::vector<Question> out;
  for (const auto& it : make_task(file_or_name, count, seed))
    out.push_back({parse_conversation(task_item_question_json(it), file_or_name), it.answer});
  return out;
}

}  // namespace nanoddp::data
