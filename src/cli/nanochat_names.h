// nanochat's names for nanoddp's commands, so that a command line from nanochat's guides runs as
// written once `python` is replaced by `nanoddp` and `torchrun` by `nanoddp run`:
//   python -m scripts.chat_cli -p "hi"    ->  nanoddp chat --prompt hi
//   torchrun ... -m scripts.chat_eval -- -i sft   ->  nanoddp run ... eval --checkpoint sft
// Each of nanochat's scripts (scripts/<name>.py, read at karpathy/nanochat 92d63d4 of 2026-07-03, plus
// the ones it removed earlier) names the nanoddp command that does its job, and its short flags
// (-i, -p, -t, -k, -a, ...) and dashed long names that differ from ours are rewritten to our flags.
// What has no equivalent here (model tags, CORE) is refused with one line saying what to give instead.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nanoddp::cli {

// Whether `word` names one of nanochat's scripts: "chat_cli" or "scripts.chat_cli".
bool is_nanochat_script(const std::string& word);

// `args` (a command line without the program name) with nanochat's names replaced by ours, when it
// starts with one of nanochat's scripts -- "chat_cli ...", "scripts.chat_cli ..." or "-m
// scripts.chat_cli ..." -- else nullopt. A "--" right after the script's name is dropped (nanochat
// writes `torchrun ... -m scripts.base_train -- --depth=24`). `note`: a line worth printing when the
// name only approximates nanochat's (mid_train), else left empty. Throws nanoddp::Error for a script
// or flag with no equivalent, naming what to use instead.
std::optional<std::vector<std::string>> translate_nanochat_command(const std::vector<std::string>& args,
                                                                   std::string* note);

// nanochat's script names, for help texts ("base_train, chat_sft, ...") and suggestions.
std::string nanochat_script_list();
std::vector<std::string> nanochat_script_names();

}  // namespace nanoddp::cli
