// Every integer and float flag of every nanoddp command, given each edge value (0, -1, empty,
// 2^63 - 1, 2^63, 2^64, 1e300, nan, inf and text), on top of a tiny command line that runs: the
// binary must exit non-zero with its error line naming the flag, or, for a value listed in
// kAccepted below, finish on its own. No value may hang it (each run has a timeout) or kill it by a
// signal.
//
// The flags come from the binary's own --help (CLI11 prints each option's type: INT, UINT, FLOAT),
// walked over every command and subcommand, so a flag or command added later is fuzzed without
// touching this file; a command with numeric flags but no base command line below fails the test
// until one is added.
//
// Cost: each run of the binary takes ~0.1 s of CPU before main() (the CUDA libraries' static
// initialisers), so a flag that several commands share with the same type and default (train, sft
// and rl bind one TrainOptions struct through one add_option_flags and check it with one
// validate_options) is fuzzed once, under the first command that has it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"
#include "test_util.h"

namespace nanoddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Each value with the name kAccepted uses for it. 2^63 - 1 is what the old parsing made of every
// larger integer.
const std::vector<std::pair<std::string, std::string>> kEdgeValues = {
    {"0", "0"}, {"-1", "-1"}, {"empty", ""}, {"2^63-1", "9223372036854775807"}, {"2^63", "9223372036854775808"},
    {"2^64", "18446744073709551616"}, {"1e300", "1e300"}, {"nan", "nan"}, {"inf", "inf"}, {"text", "text"}};

// A generous bound for one tiny run on a busy 2-core machine; a hang is what it catches.
constexpr auto kRunTimeout = 60s;

struct Flag {
  std::vector<std::string> command;  // e.g. {"data", "prepare"}
  std::vector<std::string> names;    // every spelling, e.g. --max_seq_len, --max-seq-len
  std::string type;                  // INT, UINT or FLOAT
  std::string type_and_default;      // as --help shows them, e.g. INT=2048
};

struct Outcome {
  int status = -1;
  bool timed_out = false;
  std::string err;
};

// "@OUT" in a base command line becomes a path no run has used, "@PORT" a free port, and "@DIR" the
// shared inputs' folder.
Outcome run(const std::vector<std::string>& args, const fs::path& dir, std::atomic<int>& counter) {
  std::vector<std::string> argv{testing::nanoddp_binary()};
  for (const auto& a : args) {
    std::string s = a;
    if (s == "@OUT") s = (dir / ("out" + std::to_string(counter++))).string();
    if (s == "@PORT") s = std::to_string(testing::free_port());
    if (s.starts_with("@DIR/")) s = (dir / s.substr(5)).string();
    argv.push_back(s);
  }
  testing::Proc p(argv, {"NANODDP_CACHE=" + (dir / "cache").string(), "OMP_NUM_THREADS=1"});
  Outcome o;
  // serve runs until stopped: once it serves (or has failed), SIGTERM ends it, as Ctrl-C would.
  if (args.front() == "serve" && p.wait_for([](const std::string& s) {
        return s.find("serving on") != std::string::npos || s.find("error") != std::string::npos;
      }, kRunTimeout) && p.out().find("serving on") != std::string::npos)
    ::kill(p.pid(), SIGTERM);
  const auto status = p.wait_exit(kRunTimeout);
  o.timed_out = !status.has_value();
  o.status = status.value_or(-1);
  o.err = p.err();
  return o;
}

std::string help_of(const std::vector<std::string>& command) {
  std::string line = testing::nanoddp_binary();
  for (const auto& c : command) line += " " + c;
  const auto r = testing::run_command(line + " --help");
  EXPECT_EQ(r.status, 0) << r.output;
  return r.output;
}

// The names listed under "Subcommands:" in a help text.
std::vector<std::string> subcommands(const std::string& help) {
  std::vector<std::string> out;
  std::istringstream in(help);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("Subcommands:")) {
      inside = true;
    } else if (inside && line.starts_with("  ") && line.size() > 2 && line[2] != ' ') {
      // "  env, info   Versions ...": the name, then its aliases.
      out.push_back(line.substr(2, line.find_first_of(", ", 2) - 2));
    } else if (inside && !line.empty() && line[0] != ' ') {
      inside = false;
    }
  }
  return out;
}

// The options of a help text whose type is numeric: "  --depth INT=20  Transformer depth ...".
std::vector<Flag> numeric_flags(const std::vector<std::string>& command, const std::string& help) {
  std::vector<Flag> out;
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string names, type;
    if (!line.starts_with("  -") || !(words >> names >> type)) continue;
    const std::string base_type = type.substr(0, type.find('='));  // "INT=20": the type, then the default
    if (base_type != "INT" && base_type != "UINT" && base_type != "FLOAT") continue;
    Flag f{command, {}, base_type, type};
    std::istringstream parts(names);
    for (std::string name; std::getline(parts, name, ',');) f.names.push_back(name);
    out.push_back(f);
  }
  return out;
}

// Every numeric flag under `command`, less those already in `flags` with the same name, type and
// default (see the cost note at the top).
void collect(const std::vector<std::string>& command, std::vector<Flag>& flags) {
  const std::string help = help_of(command);
  for (auto& f : numeric_flags(command, help)) {
    const bool seen = std::any_of(flags.begin(), flags.end(), [&](const Flag& g) {
      return g.names == f.names && g.type_and_default == f.type_and_default;
    });
    if (!seen) flags.push_back(f);
  }
  for (const auto& sub : subcommands(help)) {
    auto next = command;
    next.push_back(sub);
    collect(next, flags);
  }
}

std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

// A command line per command that runs in a moment: the tiniest model, one step, a few tokens (width 32:
// the default 2026 recipe's smear gate reads 24 channels).
// The inputs under @DIR are made by SetUpTestSuite.
const std::map<std::string, std::vector<std::string>> kBase = {
    {"train", {"train", "--data", "@DIR/data", "--out", "@OUT", "--depth", "1", "--aspect_ratio", "32",
               "--head_dim", "16", "--max_seq_len", "16", "--device_batch_size", "1", "--total_batch_size", "16",
               "--num_iterations", "1", "--eval_tokens", "16", "--threads", "1", "--save_minutes", "0",
               "--target_param_data_ratio", "0.01"}},
    {"sft", {"sft", "--source", "@DIR/base", "--data", "@DIR/conversations.jsonl", "--out", "@OUT",
             "--device_batch_size", "1", "--num_iterations", "1", "--threads", "1", "--save_minutes", "0"}},
    {"rl", {"rl", "--source", "@DIR/base", "--task", "@DIR/questions.jsonl", "--out", "@OUT", "--num_iterations",
            "1", "--num_samples", "2", "--examples_per_step", "1", "--max_new_tokens", "2", "--device_batch_size", "2",
            "--threads", "1", "--save_minutes", "0"}},
    {"eval", {"eval", "--checkpoint", "@DIR/base", "--task", "@DIR/questions.jsonl", "--max_tokens", "2"}},
    {"sample", {"sample", "--checkpoint", "@DIR/base", "--max_tokens", "2"}},
    {"chat", {"chat", "--checkpoint", "@DIR/base", "--prompt", "hi", "--max_tokens", "2"}},
    {"task", {"task", "--count", "2", "--out", "@OUT"}},
    {"data prepare", {"data", "prepare", "--input", "@DIR/docs.jsonl", "--out", "@OUT", "--val_every", "2"}},
    {"tokenizer train", {"tokenizer", "train", "--input", "@DIR/docs.jsonl", "--vocab_size", "270", "--out", "@OUT"}},
    {"import", {"import", "--input", "@DIR/bare.safetensors", "--out", "@OUT", "--data", "@DIR/data", "--n_head",
                "1", "--max_seq_len", "16"}},
    {"env", {"env", "--json"}},
    {"serve", {"serve", "--checkpoint", "@DIR/base", "--port", "0"}},
    // Not --standalone, which ignores --master_port.
    {"run", {"run", "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", "@PORT", "--",
             "/bin/true"}},
};

// The edge values (by their names in kEdgeValues) a flag accepts, and why; "COMMAND --flag" keys
// take precedence over "--flag" ones. Every other value must be refused with the flag named.
const std::map<std::string, std::set<std::string>> kAccepted = {
    // Any 64-bit seed.
    {"--seed", {"0", "2^63-1", "2^63"}},
    {"--task_seed", {"0", "2^63-1", "2^63"}},
    // 0 freezes a parameter group or turns decay off.
    {"--embedding_lr", {"0"}},
    {"--unembedding_lr", {"0"}},
    {"--matrix_lr", {"0"}},
    {"--adamw_matrix_lr", {"0"}},
    {"--sgd_lr", {"0"}},
    // 0 is SGD without momentum.
    {"--sgd_momentum", {"0"}},
    {"--weight_decay", {"0"}},
    {"--warmup_ratio", {"0"}},
    {"--scalar_lr", {"0"}},
    // 0: no warmup (the other recipe refuses each: 2026's warmup is --warmup_steps, classic's --warmup_ratio).
    {"--warmup_steps", {"0"}},
    {"--warmdown_ratio", {"0"}},
    {"--final_lr_frac", {"0"}},
    // 0 is off; a threshold no gradient norm reaches never clips.
    {"--grad_clip", {"0", "2^63-1", "2^63", "2^64", "1e300"}},
    // At most 2^64 (validate.cpp).
    {"--loss_scale_init", {"2^63-1", "2^63", "2^64"}},
    {"--loss_scale_growth_interval", {"2^63-1"}},
    // -1 is off. The base command line sets --num_iterations, which wins over these (their help
    // says so), so any finite budget is accepted here; test_cli_limits.cpp checks the huge ones alone.
    {"--num_epochs", {"-1", "2^63-1", "2^63", "2^64", "1e300"}},
    {"--target_flops", {"-1", "2^63-1", "2^63", "2^64", "1e300"}},
    {"--target_param_data_ratio", {"2^63-1", "2^63", "2^64", "1e300"}},
    {"--num_iterations", {"-1"}},
    {"--total_batch_size", {"-1"}},
    {"--stop_at", {"-1"}},
    // -1 or 0: only at the end; a period longer than the run: never before it.
    {"--eval_every", {"-1", "0", "2^63-1"}},
    {"--save_every", {"-1", "0", "2^63-1"}},
    {"--sample_every", {"-1", "2^63-1"}},
    {"--sample_tokens", {"0"}},
    // 0 is off; a longer time than the run never comes.
    {"--save_minutes", {"0", "2^63-1", "2^63", "2^64", "1e300"}},
    // 0: the GPU's datasheet figure (none on a CPU); a huge peak gives an MFU near 0.
    {"--peak_flops", {"0", "2^63-1", "2^63", "2^64", "1e300"}},
    {"--threads", {"0"}},
    {"--zero", {"0"}},
    {"--n_kv_head", {"0"}},
    // 0 is greedy; a huge temperature samples uniformly (logits / inf are all 0).
    {"--temperature", {"0", "2^63-1", "2^63", "2^64", "1e300"}},
    // RL needs samples that differ: greedy (0) is refused.
    {"rl --temperature", {"2^63-1", "2^63", "2^64", "1e300"}},
    // 0 and more than the vocabulary: every token.
    {"--top_k", {"0", "2^63-1"}},
    // The model's context ends a reply first.
    {"--max_tokens", {"2^63-1"}},
    // import: 0 means --data's vocabulary, nanochat's head rule.
    {"--vocab_size", {"0"}},
    {"--n_head", {"0"}},
    // data prepare: 0 lets it choose (every 20th document, or the last 10% of one text file).
    {"data prepare --val_every", {"0"}},
    // data prepare reads at most its whole input at a time.
    {"--batch_bytes", {"2^63-1"}},
    // tokenizer train: 0 is no limit.
    {"--doc_cap", {"0", "2^63-1"}},
    {"--max_chars", {"0", "2^63-1"}},
    // serve: 0 is any free port; a body limit above any body.
    {"--port", {"0"}},
    {"--max_request_bytes", {"2^63-1"}},
    // run: no restarts; the first node; SIGKILL at once when stopping workers.
    {"--max_restarts", {"0"}},
    {"--node_rank", {"0"}},
    {"--stop_timeout", {"0"}},
};

class FlagFuzz : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::ScratchDir("flag_fuzz");
    const fs::path dir = scratch_->path();
    fs::create_directories(dir / "cache");
    std::ofstream docs(dir / "docs.jsonl");
    for (int i = 0; i < 60; i++) docs << "{\"text\": \"Document " << i << " says the quick brown fox jumps.\"}\n";
    docs.close();
    std::atomic<int> unused{0};
    const std::vector<std::vector<std::string>> setup = {
        {"data", "prepare", "--input", "@DIR/docs.jsonl", "--out", "@DIR/data", "--val_every", "2"},
        {"train", "--data", "@DIR/data", "--out", "@DIR/base", "--depth", "1", "--aspect_ratio", "32", "--head_dim",
         "16", "--max_seq_len", "256", "--device_batch_size", "1", "--total_batch_size", "256", "--num_iterations",
         "1", "--eval_tokens", "256", "--threads", "1"},
        {"task", "--count", "2", "--format", "questions", "--out", "@DIR/questions.jsonl"},
        {"task", "--count", "4", "--out", "@DIR/conversations.jsonl"},
        {"export", "--checkpoint", "@DIR/base", "--out", "@DIR/bare.safetensors"},
    };
    // Kept for the test to fail on: a failed assertion here would mark the test skipped (ctest reads
    // gtest's "[  SKIPPED ]"), not failed.
    for (const auto& args : setup) {
      const Outcome o = run(args, dir, unused);
      if (o.status != 0) {
        setup_error_ = fmt::format("{} exited {}\n{}", joined(args), o.status, o.err);
        return;
      }
    }
  }
  static void TearDownTestSuite() {
    delete scratch_;
    scratch_ = nullptr;
  }
  static testing::ScratchDir* scratch_;
  static std::string setup_error_;
};

testing::ScratchDir* FlagFuzz::scratch_ = nullptr;
std::string FlagFuzz::setup_error_;

// The failure contract for one run; "" when it holds.
std::string judge(const Flag& f, const std::string& value, const Outcome& o) {
  // `value` is the name of the edge value in kEdgeValues.
  const std::string what = fmt::format("nanoddp {} {} '{}'", joined(f.command), f.names.front(), value);
  if (o.timed_out) return what + ": still running after the timeout";
  if (o.status > 128) return fmt::format("{}: killed by signal {}", what, o.status - 128);
  auto acc = kAccepted.find(joined(f.command) + " " + f.names.front());
  if (acc == kAccepted.end()) acc = kAccepted.find(f.names.front());
  const bool accepted = acc != kAccepted.end() && acc->second.count(value);
  if (o.status == 0)
    return accepted ? "" : fmt::format("{}: accepted (exit 0) but not listed in kAccepted\n{}", what, o.err);
  // One error line, last on stderr, naming the flag in any of its spellings.
  std::vector<std::string> lines;
  std::istringstream in(o.err);
  for (std::string line; std::getline(in, line);)
    if (line.find("error") != std::string::npos) lines.push_back(line);
  if (lines.size() != 1)
    return fmt::format("{}: exit {} with {} error lines:\n{}", what, o.status, lines.size(), o.err);
  const bool named = std::any_of(f.names.begin(), f.names.end(), [&](const std::string& n) {
    return lines[0].find(n) != std::string::npos;
  });
  if (!named) return fmt::format("{}: exit {}, the error does not name the flag:\n{}", what, o.status, o.err);
  return "";
}

TEST_F(FlagFuzz, EveryNumericFlagIsRefusedByNameOrRunsBounded) {
  ASSERT_TRUE(setup_error_.empty()) << "setting up the fuzz's inputs failed: " << setup_error_;
  std::vector<Flag> flags;
  collect({}, flags);
  ASSERT_GT(flags.size(), 50u) << "the help texts list fewer numeric flags than nanoddp has: has their format changed?";
  // Every command with numeric flags has a base command line, and it runs as it is.
  std::set<std::string> commands;
  for (const auto& f : flags) commands.insert(joined(f.command));
  const fs::path dir = scratch_->path();
  std::atomic<int> counter{0};
  for (const auto& c : commands) {
    ASSERT_TRUE(kBase.count(c)) << "nanoddp " << c << " has numeric flags: add a base command line to kBase";
    const Outcome o = run(kBase.at(c), dir, counter);
    ASSERT_EQ(o.status, 0) << "the base command line of nanoddp " << c << " fails:\n" << o.err;
  }
  // Two runs at a time: most exit at once, refused while the command line is parsed.
  std::vector<std::pair<const Flag*, std::pair<std::string, std::string>>> cases;
  for (const auto& f : flags)
    for (const auto& v : kEdgeValues) cases.emplace_back(&f, v);
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto worker = [&] {
    for (size_t i; (i = next++) < cases.size();) {
      const auto& [f, value] = cases[i];
      std::vector<std::string> args = kBase.at(joined(f->command));
      // Last, so that it overrides the base's value (a repeated flag takes its last value); before a
      // "--", after which `nanoddp run` passes everything to the workers.
      const auto at = std::find(args.begin(), args.end(), "--");
      args.insert(args.insert(at, value.second), f->names.front());
      const std::string bad = judge(*f, value.first, run(args, dir, counter));
      if (!bad.empty()) {
        std::lock_guard lock(mu);
        failures.push_back(bad);
      }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  std::sort(failures.begin(), failures.end());
  for (const auto& bad : failures) ADD_FAILURE() << bad;
  std::cout << cases.size() << " runs over " << flags.size() << " flags of " << commands.size() << " commands, "
            << failures.size() << " failures\n";
}

}  // namespace
}  // namespace nanoddp
