// The bundled chat tasks, generated in-project with a verifiable final answer, for SFT (as
// conversations), RL and evaluation (as questions with answers):
//  - "spelling": spell a word letter by letter (nanochat's SpellingBee idea);
//  - "letters":  count how often a letter occurs in a word, spelling it out first;
//  - "arithmetic": a short word problem with two operations (GSM8K's convention: the solution
//    ends with a line "#### N" holding the final answer);
//  - "addition": the same kind of word problem with one addition of numbers 1-10 (its first step),
//    which a depth-4 model learns on a CPU in minutes (the main job's chat task).
// Words come from the npm package word-list (scripts/setup.sh installs it); the same (name, seed,
// count) always gives the same items.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/conversation.h"

namespace nanoddp::data {

struct TaskItem {
  std::string question;  // the user's message
  std::string solution;  // the assistant's message, ending in "#### <answer>"
  std::string answer;    // the final answer alone
};

// The task names make_task accepts.
std::vector<std::string> task_names();

// `count` items of task `name`, drawn with `seed`. `words_file`: one word per line; empty = the
// word-list package's words.txt. Throws nanoddp::Error for an unknown name or a missing word list.
std::vector<TaskItem> make_task(const std::string& name, int64_t count, uint64_t seed,
                                const std::string& words_file = "");

// One JSONL line: {"messages": [user, assistant]} (for SFT), or {"messages": [user], "answer":
// solution} (for RL and evaluation; the solution's "#### N" line holds the final answer, as GSM8K's).
std::string task_item_conversation_json(const TaskItem& item);
std::string task_item_question_json(const TaskItem& item);

// RL's and evaluation's questions: a JSONL file of them (read_questions) when `file_or_name` is a
// file, else `count` items of the bundled task of that name drawn with `seed`.
std::vector<Question> load_questions(const std::string& file_or_name, int64_t count, uint64_t seed);

// The reward rules of RL and evaluation (--reward): 1 when the completion reaches the reference
// answer, else 0.
//   gsm8k:    GSM8K's convention: the completion's final answer (the text after its last "####" up to
//             the line's end, trimmed; without "####" the whole trimmed completion) equals the
//             answer's (its own text after "####" when it holds one: a GSM8K solution);
//   contains: the completion contains the answer as a whole word or number, not as part of a
//             longer one ("12" is not in "123", "a12", "12.5", "-12" or "1,120");
//   exact:    the whole trimmed completion equals the trimmed answer, character for character;
//   auto:     gsm8k for an answer holding "####", contains otherwise (resolve_reward_rule decides
//             it per task first: gsm8k for the bundled tasks, whose solutions end in "#### N").
// Numbers written as plain decimals compare as exact decimals under gsm8k and contains: "14.0" is
// 14, "1,000" is 1000, digit by digit (no rounding through a double). An empty answer never matches.
enum class RewardRule { Auto, Gsm8k, Contains, Exact };

// "auto", "gsm8k", "contains" or "exact"; anything else throws nanoddp::Error naming the choices.
RewardRule parse_reward_rule(const std::string& name);
const char* reward_rule_name(RewardRule rule);
// The rule a run uses for `task` (a questions file or a bundled task's name): `asked` unless Auto;
// Auto is gsm8k for a bundled task and stays Auto (decided per answer) for a file.
RewardRule resolve_reward_rule(RewardRule asked, const std::string& task);
// The same, naming a file's rule where its answers agree: gsm8k when all hold "####", contains when
// none does; Auto only for a file that mixes them (each answer then decides its own).
RewardRule resolve_reward_rule(RewardRule asked, const std::string& task, const std::vector<Question>& questions);

bool answer_is_correct(const std::string& completion, const std::string& answer, RewardRule rule = RewardRule::Gsm8k);

}  // namespace nanoddp::data
