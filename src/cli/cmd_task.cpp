// nanoddp task: writes a bundled chat task (data/tasks.h) as JSONL, for `sft` (conversations) or
// for RL and evaluation (questions with answers).
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "core/error.h"
#include "core/files.h"
#include "data/tasks.h"

namespace nanoddp::cli {

namespace {

struct TaskArgs {
  std::string name = "arithmetic";
  int64_t count = 1000;
  uint64_t seed = 1;
  std::string format = "conversations";
  std::string out = "";
  std::string words = "";
  template <typename V>
  void visit(V&& v) {
    v(name, "name", "spelling, letters, arithmetic (two steps) or addition (one step, small numbers)");
    v(count, "count", "Items to write");
    v(seed, "seed", "Seed of the items (another seed, other items: e.g. one for training, one for evaluation)");
    v(format, "format", "conversations (for sft) or questions (JSON lines with an answer, for rl and eval)");
    v(out, "out", "The JSONL file to write");
    v(words, "words", "Word list, one word per line (default: the npm package word-list)");
  }
};

}  // namespace

void add_task_command(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("task", "Write a bundled chat task (spelling, letters, arithmetic, addition) as JSONL");
  auto args = std::make_shared<TaskArgs>();
  add_option_flags(*cmd, *args);
  cmd->callback([args] {
    NANODDP_CHECK(!args->out.empty(), "--out is required: the JSONL file to write");
    check_output_path("--out", args->out, PathKind::File);
    NANODDP_CHECK(args->format == "conversations" || args->format == "questions", "--format must be conversations "
                  "or questions (got '{}')", args->format);
    const auto items = data::make_task(args->name, args->count, args->seed, args->words);
    std::string text;
    for (const auto& it : items)
      text += (args->format == "conversations" ? data::task_item_conversation_json(it)
                                               : data::task_item_question_json(it)) + "\n";
    write_file_atomically(args->out, text);
    fmt::print("wrote {} {} items of task {} to {}\n", items.size(), args->format, args->name, args->out);
  });
}

}  // namespace nanoddp::cli
