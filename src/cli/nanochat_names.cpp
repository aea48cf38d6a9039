// See nanochat_names.h. The tables hold facts about nanochat's scripts (their names and argparse
// flags at karpathy/nanochat 92d63d4); the translation is a rewrite of the words before CLI11 sees
// them, so every nanoddp command keeps one definition of its flags and --help.
#include "cli/nanochat_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace nanoddp::cli {

namespace {

// One of nanochat's flags: its spellings ("-i", "--source"; a long name matches with dashes or
// underscores) and our flag, or, where there is none, what to give instead.
struct FlagRule {
  std::vector<std::string> names;
  std::string ours;
  std::string instead;
};

struct Script {
  std::string name;                  // scripts/<name>.py
  std::vector<std::string> command;  // ours; empty: none, and `line` says what to use
  std::string line;                  // with a command: a note printed when used ("" = an exact alias)
  std::vector<FlagRule> flags;       // the flags whose names differ from ours
};

const std::string kCheckpointIsAFolder =
    "nanoddp has no model tags or step numbers: a checkpoint is a folder; give a run's --out (its newest "
    "checkpoint) or OUT/checkpoints/step_NNNNNN (six digits) as --checkpoint";
const std::string kSourceIsAFolder =
    "nanoddp has no model tags or step numbers: give the checkpoint to start from as --source, a run's --out (its "
    "newest checkpoint) or OUT/checkpoints/step_NNNNNN (six digits)";

// chat_cli, chat_eval and chat_web load "-i sft|rl" from ~/.cache/nanochat; here -i names the folder.
const std::vector<FlagRule> kInference = {{{"-i", "--source"}, "--checkpoint", ""},
                                          {{"-t"}, "--temperature", ""},
                                          {{"-k"}, "--top_k", ""},
                                          {{"-g", "--model-tag"}, "", kCheckpointIsAFolder},
                                          {{"-s", "--step"}, "", kCheckpointIsAFolder}};
const std::string kNoEvalBatch =
    "nanoddp eval has no batch size: it answers one problem at a time on each rank; spread the problems over "
    "ranks with `nanoddp run --nproc_per_node N eval`";
const std::vector<FlagRule> kFineTune = {{{"--model-tag"}, "", kSourceIsAFolder},
                                         {{"--model-step"}, "", kSourceIsAFolder}};

std::vector<FlagRule> with(std::vector<FlagRule> rules, const std::vector<FlagRule>& more) {
  rules.insert(rules.end(), more.begin(), more.end());
  return rules;
}

const std::vector<Script>& scripts() {
  static const std::string no_base_eval =
      "nanochat's CORE metric is not in nanoddp: `nanoddp train` prints the validation bits per byte (every "
      "--eval_every steps, also in OUT/metrics.jsonl), `nanoddp sample` samples from a checkpoint, and `nanoddp "
      "eval` scores a chat checkpoint on a task";
  static const std::vector<Script> all = {
      {"base_train", {"train"}, "", {}},
      {"base_eval", {}, "nanoddp has no base_eval: " + no_base_eval, {}},
      {"base_loss", {}, "nanochat merged base_loss into base_eval, and nanoddp has neither: " + no_base_eval, {}},
      {"mid_train", {"sft"}, "mid_train is gone from nanochat (2026-01-31: midtraining's conversations joined "
       "chat_sft's mixture); running `nanoddp sft`: give its conversations to --data", kFineTune},
      {"chat_sft", {"sft"}, "", kFineTune},
      {"chat_rl", {"rl"}, "", kFineTune},
      {"chat_eval", {"eval"}, "", with(kInference, {{{"-a", "--task-name"}, "--task", ""},
                                                    {{"-m", "--max-new-tokens"}, "--max_tokens", ""},
                                                    {{"-n"}, "--num_samples", ""},
                                                    {{"-x", "--max-problems"}, "--count", ""},
                                                    {{"-b", "--batch-size"}, "", kNoEvalBatch}})},
      {"chat_cli", {"chat"}, "", with(kInference, {{{"-p"}, "--prompt", ""}})},
      {"chat_web", {"serve"}, "", with(kInference, {{{"-p"}, "--port", ""},
                                                    {{"-m"}, "--max_tokens", ""},
                                                    {{"-n", "--num-gpus"}, "", "nanoddp serve runs one model on "
                                                     "one device: choose it with --device (cpu, cuda or cuda:N)"}})},
      {"tok_train", {"tokenizer", "train"}, "", {}},
      {"tok_eval", {}, "nanoddp has no tok_eval: `nanoddp data prepare --input TEXT --tokenizer FILE --out DIR` "
       "prints the tokenizer's characters per token on your own text (tok_eval's compression ratio)", {}},
  };
  return all;
}

const Script* find_script(std::string word) {
  if (word.starts_with("scripts.")) word = word.substr(8);
  for (const Script& s : scripts())
    if (s.name == word) return &s;
  return nullptr;
}

std::string dashed(std::string s) {
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

// The rule `word` invokes and the value written into it ("-t0.5", "-t=0.5", "--source=sft"), if any.
struct Match {
  const FlagRule* rule = nullptr;
  std::optional<std::string> value;
};

Match match_flag(const Script& s, const std::string& word) {
  std::string name = word;
  std::optional<std::string> value;
  if (word.starts_with("--")) {
    if (auto eq = word.find('='); eq != std::string::npos) {
      name = word.substr(0, eq);
      value = word.substr(eq + 1);
    }
    name = dashed(name);
  } else if (word.size() > 2 && word[0] == '-' && std::isalpha(static_cast<unsigned char>(word[1]))) {
    // argparse's -t0.5 and -t=0.5.
    name = word.substr(0, 2);
    value = word.substr(word[2] == '=' ? 3 : 2);
  }
  for (const FlagRule& r : s.flags)
    if (std::find(r.names.begin(), r.names.end(), name) != r.names.end()) return {&r, value};
  return {};
}

std::string spellings(const FlagRule& r) {
  std::string out;
  for (const auto& n : r.names) out += (out.empty() ? "" : "/") + n;
  return out;
}

}  // namespace

bool is_nanochat_script(const std::string& word) { return find_script(word) != nullptr; }

std::vector<std::string> nanochat_script_names() {
  std::vector<std::string> names;
  for (const Script& s : scripts()) names.push_back(s.name);
  return names;
}

std::string nanochat_script_list() {
  std::string out;
  for (const auto& name : nanochat_script_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::optional<std::vector<std::string>> translate_nanochat_command(const std::vector<std::string>& args,
                                                                   std::string* note) {
  size_t i = 0;
  if (args.size() >= 2 && args[0] == "-m") {
    NANODDP_CHECK(is_nanochat_script(args[1]), "nanoddp -m runs nanochat's scripts by name ({}, as scripts.NAME), "
                  "and '{}' is not one of them; run a Python module with `nanoddp run -m {}` or `python3 -m {}`",
                  nanochat_script_list(), args[1], args[1], args[1]);
    i = 1;
  }
  if (i >= args.size() || !is_nanochat_script(args[i])) return std::nullopt;
  const Script& s = *find_script(args[i]);
  NANODDP_CHECK(!s.command.empty(), "{}", s.line);
  if (note != nullptr) *note = s.line;
  std::vector<std::string> out = s.command;
  if (++i < args.size() && args[i] == "--") i++;
  for (; i < args.size(); i++) {
    const Match m = match_flag(s, args[i]);
    if (m.rule == nullptr) {
      out.push_back(args[i]);
      continue;
    }
    NANODDP_CHECK(!m.rule->ours.empty(), "{} of nanochat's {}: {}", spellings(*m.rule), s.name, m.rule->instead);
    out.push_back(m.rule->ours);
    // The value: written into the word, or the next word.
    if (m.value) out.push_back(*m.value);
    else if (i + 1 < args.size()) out.push_back(args[++i]);
  }
  return out;
}

}  // namespace nanoddp::cli
