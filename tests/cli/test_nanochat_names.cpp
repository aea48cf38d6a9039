// nanochat's names for nanoddp's commands (src/cli/nanochat_names.h): the README's table of
// nanochat and torchrun command lines, every row run both ways; a real run through an alias under
// the launcher, equal to the same run under our own name; the flags that have no equivalent; the
// flags of other trainers (--epochs, --batch_size); and `clear` in chat.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/nanochat_names.h"
#include "corpus.h"
#include "subprocess.h"
#include "test_util.h"

namespace nanoddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Proc;
using testing::ScratchDir;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

using testing::Outcome;

// The nanoddp binary with `args`, in directory `cwd` ("" = this one).
Outcome nanoddp(const std::vector<std::string>& args, const std::string& cwd = "") {
  std::vector<std::string> argv = testing::nanoddp_argv(args);
  if (!cwd.empty()) {
    // Through the shell only to change directory; the words go through "$@" unchanged.
    argv.insert(argv.begin(), {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", cwd});
  }
  return testing::run_to_end(argv, {}, 120s);
}

// A command line as the README writes it: words split at spaces, "double quotes" keep spaces.
std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any) words.push_back(word);
      word.clear();
      any = false;
    } else {
      word += c;
      any = true;
    }
  }
  if (any) words.push_back(word);
  return words;
}

// The text between the first pair of backticks in `cell`.
std::string backticked(const std::string& cell) {
  const size_t a = cell.find('`'), b = cell.find('`', a + 1);
  return a == std::string::npos || b == std::string::npos ? "" : cell.substr(a + 1, b - a - 1);
}

struct Row {
  std::string nanochat, ours;
  bool none = false;  // ours is the nearest command, not an equivalent
};

std::vector<Row> readme_rows() {
  std::ifstream f(std::string(NANODDP_SOURCE_DIR) + "/README.md");
  std::vector<Row> rows;
  bool in = false;
  for (std::string line; std::getline(f, line);) {
    if (line.find("<!-- nanochat-table:begin -->") != std::string::npos) in = true;
    if (line.find("<!-- nanochat-table:end -->") != std::string::npos) break;
    if (!in || !line.starts_with("| `")) continue;
    const size_t bar = line.find(" | ", 2);
    Row r{backticked(line.substr(0, bar)), backticked(line.substr(bar + 3))};
    r.none = line.substr(bar + 3).starts_with("none:");
    rows.push_back(r);
  }
  return rows;
}

// nanochat's line made ours by the README's rule: python -> nanoddp, torchrun -> nanoddp run.
std::vector<std::string> as_nanoddp(const std::string& nanochat) {
  std::vector<std::string> w = split_words(nanochat);
  if (w.front() == "python") w.erase(w.begin());
  if (w.front() == "torchrun") w.front() = "run";
  return w;
}

std::vector<std::string> with_help(std::vector<std::string> w) {
  w.push_back("--help");
  return w;
}

// Lines in order, so that the help of workers printing at once compares as a whole.
std::string sorted_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Every flag of our command line is one the command takes (--help alone would not say: it wins over
// any other error). Run for real in an empty folder, where it can only fail on what is missing (a
// dataset, a checkpoint, --source): no flag may be the complaint.
void expect_flags_known(const std::vector<std::string>& ours) {
  ScratchDir empty("nanochat_names_empty");
  const Outcome o = nanoddp(ours, empty.str());
  EXPECT_TRUE(o.status == 1 || o.status == 2) << o.status << " " << o.err;
  for (const char* complaint : {"not expected", "did you mean", "nanochat's"})
    EXPECT_EQ(o.err.find(complaint), std::string::npos) << o.err;
}

// A row runs as written: its words translate to exactly the right column (what `nanoddp run`
// launches is the line it prints), both lines reach the same command, whose --help they print, and
// that command takes every flag of the line.
void check_row(const Row& row) {
  SCOPED_TRACE(row.nanochat);
  const std::vector<std::string> given = as_nanoddp(row.nanochat);
  std::vector<std::string> ours = split_words(row.ours);
  ASSERT_EQ(ours.front(), "nanoddp");
  ours.erase(ours.begin());
  if (row.none) {
    // 2 for a command line, 1 for the launcher's error about its workers' command.
    const Outcome o = nanoddp(given);
    EXPECT_EQ(o.status, given.front() == "run" ? 1 : 2) << o.err;
    EXPECT_NE(o.err.find("nanoddp: error: "), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("`" + row.ours + "`"), std::string::npos) << o.err;
    return;
  }
  if (given.front() == "run") {
    // The launcher's flags, then -m scripts.NAME [--] ARGS: the workers' words are printed.
    const auto m = std::find(given.begin(), given.end(), "-m");
    ASSERT_NE(m, given.end());
    const size_t flags = m - given.begin();
    ASSERT_EQ(std::vector<std::string>(given.begin(), m), std::vector<std::string>(ours.begin(), ours.begin() + flags));
    std::string workers;
    for (size_t i = flags; i < ours.size(); i++) workers += ours[i] + " ";
    const Outcome o = nanoddp(with_help(given));
    ASSERT_EQ(o.status, 0) << o.err;
    EXPECT_NE(o.err.find("the workers run `nanoddp " + workers + "--help`"), std::string::npos) << o.err;
    const Outcome want = nanoddp(with_help(ours));
    ASSERT_EQ(want.status, 0) << want.err;
    EXPECT_EQ(sorted_lines(o.out), sorted_lines(want.out));
    expect_flags_known({ours.begin() + flags, ours.end()});
    return;
  }
  std::string note;
  const auto translated = cli::translate_nanochat_command(given, &note);
  ASSERT_TRUE(translated.has_value());
  EXPECT_EQ(*translated, ours);
  const Outcome o = nanoddp(with_help(given)), want = nanoddp(with_help(ours));
  ASSERT_EQ(o.status, 0) << o.err;
  ASSERT_EQ(want.status, 0) << want.err;
  EXPECT_FALSE(want.out.empty());
  EXPECT_EQ(o.out, want.out);
  expect_flags_known(ours);
}

TEST(NanochatNames, ReadmeTableRowsRunAsWritten) {
  const std::vector<Row> rows = readme_rows();
  // Every script of nanochat's has a row (a table cut short would pass otherwise).
  for (const char* name : {"tok_train", "tok_eval", "base_train", "base_eval", "mid_train", "chat_sft", "chat_rl",
                           "chat_eval", "chat_cli", "chat_web"}) {
    EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [&](const Row& r) {
      return r.nanochat.find(std::string("scripts.") + name) != std::string::npos;
    })) << "no row for " << name;
  }
  for (const Row& row : rows) check_row(row);
}

TEST(NanochatNames, TranslatesArgparseSpellings) {
  using V = std::vector<std::string>;
  auto tr = [](const V& args) { return cli::translate_nanochat_command(args, nullptr); };
  // Not nanochat's: left alone.
  EXPECT_FALSE(tr({"train", "--depth", "4"}).has_value());
  EXPECT_FALSE(tr({}).has_value());
  // argparse's forms of a short flag's value, a long name with '=' or underscores, and the "--"
  // torchrun's lines put after the module.
  EXPECT_EQ(*tr({"chat_cli", "-t0.5", "-k=7", "--source=rl", "-p", "-i"}),
            (V{"chat", "--temperature", "0.5", "--top_k", "7", "--checkpoint", "rl", "--prompt", "-i"}));
  EXPECT_EQ(*tr({"scripts.chat_eval", "--", "--task_name", "spelling", "--max-problems=3", "-n", "2"}),
            (V{"eval", "--task", "spelling", "--count", "3", "--num_samples", "2"}));
  // Our own flags pass through, and a negative number is a value, not a flag.
  EXPECT_EQ(*tr({"-m", "scripts.chat_cli", "--max_tokens", "9", "-t", "-1"}),
            (V{"chat", "--max_tokens", "9", "--temperature", "-1"}));
  EXPECT_EQ(*tr({"tok_train", "--vocab-size=512"}), (V{"tokenizer", "train", "--vocab-size=512"}));
  // mid_train says what it runs; the exact aliases say nothing.
  std::string note;
  EXPECT_EQ(*cli::translate_nanochat_command({"mid_train"}, &note), V{"sft"});
  EXPECT_NE(note.find("mid_train is gone from nanochat"), std::string::npos) << note;
  note.clear();
  cli::translate_nanochat_command({"chat_sft"}, &note);
  EXPECT_EQ(note, "");
}

// What has no equivalent ends in one line naming what to give instead (was: "not expected").
TEST(NanochatNames, FlagsWithoutEquivalentPointAtOurs) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> wants;
  };
  const std::vector<Case> cases = {
      {{"chat_cli", "-g", "d12"}, {"-g/--model-tag of nanochat's chat_cli", "--checkpoint", "step_NNNNNN"}},
      {{"-m", "scripts.chat_eval", "-i", "sft", "-s", "500"}, {"-s/--step of nanochat's chat_eval", "--checkpoint"}},
      {{"chat_eval", "-b", "8"}, {"-b/--batch-size", "--nproc_per_node"}},
      {{"chat_web", "--num_gpus=2"}, {"-n/--num-gpus", "--device"}},
      {{"chat_sft", "--model-tag", "d20"}, {"--model-tag of nanochat's chat_sft", "--source"}},
      {{"chat_rl", "--model-step=100"}, {"--model-step of nanochat's chat_rl", "--source"}},
      {{"base_loss"}, {"merged base_loss into base_eval", "bits per byte"}},
      {{"-m", "scripts.tok_eval"}, {"nanoddp has no tok_eval", "characters per token"}},
      {{"-m", "mypackage.train"}, {"'mypackage.train' is not one of them", "nanoddp run -m mypackage.train"}},
      // A misspelt script name is suggested like a misspelt command.
      {{"chat_clj", "-p", "hi"}, {"unknown command 'chat_clj' (did you mean 'chat_cli'?)"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args.front() + " " + c.args.back());
    const Outcome o = nanoddp(c.args);
    EXPECT_EQ(o.status, 2) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_TRUE(o.err.starts_with("nanoddp: error: ")) << o.err;
    for (const auto& w : c.wants) EXPECT_NE(o.err.find(w), std::string::npos) << "wanted '" << w << "' in " << o.err;
  }
}

// seed-style flags: what they are here, and the words not expected in the order given (CLI11 lists
// them in reverse).
TEST(NanochatNames, OtherTrainersFlagsPointAtOurs) {
  const Outcome o = nanoddp({"train", "--data", "d", "--epochs", "5", "--batch_size", "8", "--model-tag", "x"});
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  for (const char* w : {"not expected: --epochs 5 --batch_size 8 --model-tag x;", "--epochs is --num_epochs here",
                        "--batch_size is two flags here: --device_batch_size", "--total_batch_size",
                        "--model-tag is nanochat's: checkpoints go to --out"})
    EXPECT_NE(o.err.find(w), std::string::npos) << "wanted '" << w << "' in " << o.err;
}

// nanochat's flags that have no equivalent, as its scripts spell them, each with what to do here.
TEST(NanochatNames, NanochatFlagsWithoutEquivalentSayWhatToDo) {
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"base_train", "--run=d20"},           {"base_train", "--fp8-recipe=rowwise"},
      {"base_train", "--core-metric-every=-1"}, {"base_train", "--model-tag=d20"},
      {"chat_sft", "--chatcore-every=200"},
      {"chat_sft", "--mmlu-epochs=3"},       {"chat_sft", "--gsm8k-epochs=4"},
      {"chat_rl", "--eval-examples=400"}};
  for (const auto& [script, flag] : flags) {
    SCOPED_TRACE(script + " " + flag);
    const Outcome o = nanoddp({"-m", "scripts." + script, "--data", "d", "--source", "s", flag});
    EXPECT_EQ(o.status, 2) << o.err;
    const std::string name = flag.substr(0, flag.find('='));
    EXPECT_NE(o.err.find("; " + name + " is nanochat's: "), std::string::npos) << o.err;
  }
  // chat_sft's --load-optimizer has an equivalent now: it parses, and the run stops at the missing source.
  const Outcome lo = nanoddp({"-m", "scripts.chat_sft", "--data", "d", "--source", "s", "--load-optimizer=0"});
  EXPECT_EQ(lo.status, 1) << lo.err;
  EXPECT_NE(lo.err.find("--source s does not exist"), std::string::npos) << lo.err;
}

// A real run through nanochat's name under the launcher trains the same model as our own name.
TEST(NanochatNames, TorchrunLineTrainsTheSameModel) {
  ScratchDir dir("nanochat_names_" + test_name());
  testing::make_byte_dataset(dir.str(), 40, 5);
  const std::vector<std::string> tiny = {"--depth=1", "--aspect-ratio=32", "--head-dim=32", "--max-seq-len=16",
                                         "--device-batch-size=2", "--total-batch-size=64", "--num-iterations=2",
                                         "--eval-every=-1", "--threads=1", "--data", dir.str("data")};
  std::vector<std::string> theirs = {"run", "--standalone", "--nproc_per_node=2", "-m", "scripts.base_train", "--"};
  theirs.insert(theirs.end(), tiny.begin(), tiny.end());
  theirs.insert(theirs.end(), {"--out", dir.str("theirs")});
  std::vector<std::string> ours = {"run", "--standalone", "--nproc_per_node=2", "train"};
  ours.insert(ours.end(), tiny.begin(), tiny.end());
  ours.insert(ours.end(), {"--out", dir.str("ours")});
  const Outcome a = nanoddp(theirs), b = nanoddp(ours);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_NE(a.err.find("scripts.base_train is nanochat's script"), std::string::npos) << a.err;
  const std::string weights = "/checkpoints/step_000002/model.safetensors";
  const std::string got = testing::read_file(dir.str("theirs") + weights);
  ASSERT_FALSE(got.empty());
  EXPECT_TRUE(got == testing::read_file(dir.str("ours") + weights)) << "the two runs' weights differ";
}

// In a nanochat checkout, -m scripts.NAME is its own Python file, run as torchrun would; so is any
// module that is not nanochat's.
TEST(NanochatNames, RunKeepsPythonForTheUsersOwnModules) {
  ScratchDir dir("nanochat_names_" + test_name());
  fs::create_directories(dir.path() / "scripts");
  std::ofstream(dir.str("scripts/base_train.py")) << "import os\nprint('python ran rank', os.environ['RANK'])\n";
  std::ofstream(dir.str("scripts/__init__.py")) << "";
  const Outcome o = nanoddp({"run", "--nproc_per_node=1", "-m", "scripts.base_train"}, dir.str());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("python ran rank 0"), std::string::npos) << o.out;
  EXPECT_EQ(o.err.find("nanochat's script"), std::string::npos) << o.err;
  // Without the file: our command, and a line saying so.
  fs::remove(dir.str("scripts/base_train.py"));
  const Outcome ours = nanoddp({"run", "--nproc_per_node=1", "-m", "scripts.base_train", "--", "--help"}, dir.str());
  ASSERT_EQ(ours.status, 0) << ours.err;
  EXPECT_NE(ours.err.find("the workers run `nanoddp train --help`"), std::string::npos) << ours.err;
  // `python -m scripts.NAME` (torchrun --no-python's form) and the bare name do the same.
  const Outcome python = nanoddp({"run", "--no_python", "python3", "-m", "scripts.chat_cli", "-p", "hi", "--help"},
                                 dir.str());
  ASSERT_EQ(python.status, 0) << python.err;
  EXPECT_NE(python.err.find("the workers run `nanoddp chat --prompt hi --help`"), std::string::npos) << python.err;
  const Outcome bare = nanoddp({"run", "chat_rl", "--help"}, dir.str());
  ASSERT_EQ(bare.status, 0) << bare.err;
  EXPECT_NE(bare.out.find("Usage: nanoddp rl [OPTIONS]"), std::string::npos) << bare.out;
}

// `clear` starts a new conversation, as in chat_cli: the reply after it is the first reply again
// (sampled, not greedy: the seeds of a new conversation start again too), and a line says so.
TEST(NanochatNames, ChatClearStartsANewConversation) {
  ScratchDir dir("nanochat_names_" + test_name());
  testing::make_byte_dataset(dir.str(), 60, 3);
  const Outcome train = nanoddp({"train", "--data", dir.str("data"), "--out", dir.str("out"), "--depth", "1",
                                 "--aspect_ratio", "32", "--head_dim", "32", "--max_seq_len", "64",
                                 "--device_batch_size", "2", "--total_batch_size", "128", "--num_iterations", "2",
                                 "--eval_every", "-1", "--threads", "1"});
  ASSERT_EQ(train.status, 0) << train.err;
  const std::string chat = "printf 'hi\\nwhat now\\n Clear \\nhi\\nquit\\n' | \"$0\" chat_cli -i \"$1\" -t 1 -k 0 "
                           "--max_tokens 6";
  Proc p({"/bin/sh", "-c", chat, testing::nanoddp_binary(), dir.str("out")});
  ASSERT_EQ(p.wait_exit(120s), 0) << p.all();
  const std::string out = p.out();
  // One reply per "assistant> ", up to the next prompt.
  std::vector<std::string> replies;
  for (size_t at = out.find("assistant> "); at != std::string::npos; at = out.find("assistant> ", at + 1)) {
    const size_t begin = at + 11, end = out.find("\nuser> ", begin);
    replies.push_back(out.substr(begin, end - begin));
  }
  ASSERT_EQ(replies.size(), 3u) << out;
  EXPECT_NE(out.find("(conversation cleared: the next message starts a new one)"), std::string::npos) << out;
  EXPECT_EQ(replies[2], replies[0]) << out;
  // "what now" went into the first conversation: its reply was sampled with the second turn's seed.
  const Outcome once = nanoddp({"chat", "--checkpoint", dir.str("out"), "--prompt", "hi", "--temperature", "1",
                                "--top_k", "0", "--max_tokens", "6"});
  ASSERT_EQ(once.status, 0) << once.err;
  EXPECT_EQ(once.out, replies[0].substr(0, replies[0].find_last_not_of('\n') + 1) + "\n");
}

}  // namespace
}  // namespace nanoddp
