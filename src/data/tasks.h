// The bundled chat tasks, generated in-project with a verifiable final answer, for SFT (as
// conversations), RL and evaluation (as questions with answers):
//  - "spelling": spell a word letter by letter (nanochat's SpellingBee idea);
//  - "letters":  count how often a letter occurs in a word, spelling it out first;
//  - "arithmetic": a short word problem with two operations (GSM8K's convention: the solution
//    ends with a line "#### N" holding the final answer).
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

// One JSONL line: {"messages": [user, assistant]} (for SFT), or {"messages": [user], "answer": ...}
// (for RL and evaluation).
std::string task_item_conversation_json(const TaskItem& item);
std::string task_item_question_json(const TaskItem& item);

// RL's and evaluation's questions: a JSONL file of them (read_questions) when `file_or_name` is a
// file, else `count` items of the bundled task of that name drawn with `seed`.
std::vector<Question> load_questions(const std::string& file_or_name, int64_t count, uint64_t seed);

// The reward rule of RL and evaluation: 1 when the completion's final answer (the text after its
// last "####", trimmed; else the whole completion) equals `answer`, numbers compared as numbers.
bool answer_is_correct(const std::string& completion, const std::string& answer);

}  // namespace nanoddp::data
