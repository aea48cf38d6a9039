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

TaskItem arithmetic(Rng& rng) {
  static const char* kNames[] = {"Ava", "Ben", "Chloe", "Dan", "Emma", "Finn", "Grace", "Hugo", "Iris", "Jack"};
  static const char* kThings[] = {"apples", "books", "coins", "marbles", "pencils", "stamps", "shells", "cards"};
  const std::string name = kNames[pick(rng, 10)], thing = kThings[pick(rng, 8)];
  const int64_t a = 5 + pick(rng, 46), b = 2 + pick(rng, 30), c = 1 + pick(rng, a + b);  // never below zero
  const int64_t mid = a + b, end = mid - c;
  return {fmt::format("{} has {} {}. {} gets {} more and then gives away {}. How many {} does {} have now?", name, a,
                      thing, name, b, c, thing, name),
          fmt::format("{} + {} = {}. {} - {} = {}.\n#### {}", a, b, mid, mid, c, end, end), std::to_string(end)};
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

std::vector<std::string> task_names() { return {"spelling", "letters", "arithmetic"}; }

std::vector<TaskItem> make_task(const std::string& name, int64_t count, uint64_t seed, const std::string& words_file) {
  const auto names = task_names();
  NANODDP_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "unknown task '{}' (spelling, letters or "
                "arithmetic)", name);
  // The items are made in memory, a few hundred bytes each: 2^24 of them are already gigabytes.
  constexpr int64_t kMaxItems = int64_t{1} << 24;
  NANODDP_CHECK(count >= 1 && count <= kMaxItems, "--count must be between 1 and {} (got {})", kMaxItems, count);
  std::vector<std::string> words;
  if (name != "arithmetic") words = load_words(words_file);
  Rng rng(seed, stream_id(name));
  std::vector<TaskItem> items;
  items.reserve(count);
  for (int64_t i = 0; i < count; i++)
    items.push_back(name == "spelling" ? spelling(rng, words) : name == "letters" ? letters(rng, words) : arithmetic(rng));
  return items;
}

std::string task_item_conversation_json(const TaskItem& item) {
  return nlohmann::json{{"messages", {{{"role", "user"}, {"content", item.question}},
                                      {{"role", "assistant"}, {"content", item.solution}}}}}
      .dump();
}

std::string task_item_question_json(const TaskItem& item) {
  return nlohmann::json{{"messages", {{{"role", "user"}, {"content", item.question}}}}, {"answer", item.answer}}.dump();
}

bool answer_is_correct(const std::string& completion, const std::string& answer) {
  const size_t mark = completion.rfind("####");
  std::string got = trim_answer(mark == std::string::npos ? completion : completion.substr(mark + 4));
  const size_t line = got.find('\n');
  if (line != std::string::npos) got = trim_answer(got.substr(0, line));
  const std::string want = trim_answer(answer);
  if (want.empty()) return false;  // nothing to match (read_questions refuses such answers)
  if (got == want) return true;
  // Numbers as numbers: "14.0" and "14", "1,000" and "1000" (commas dropped, as nanochat's GSM8K
  // does). Only plain decimals, compared digit by digit once written the one way: through a double
  // (strtod), 9007199254740993 equalled 9007199254740992, and strtod also took "0x0", "inf", "1e1".
  const std::optional<std::string> g = canonical_decimal(got), w = canonical_decimal(want);
  return g && w && *g == *w;
}

std::vector<Question> load_questions(const std::string& file_or_name, int64_t count, uint64_t seed) {
  if (std::filesystem::exists(file_or_name)) return read_questions(file_or_name);
  // A bundled task's name has neither a '/' nor a '.': anything with one was meant as a file.
  NANODDP_CHECK(file_or_name.find_first_of("/.") == std::string::npos,
                "the questions file {} does not exist: check the path (or name a built-in task: spelling, letters or "
                "arithmetic)", file_or_name);
  std::vector<Question> out;
  for (const auto& it : make_task(file_or_name, count, seed))
    out.push_back({parse_conversation(task_item_question_json(it), file_or_name), it.answer});
  return out;
}

}  // namespace nanoddp::data
