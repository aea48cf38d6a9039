// nanoddp run [flags] <command> [args]: the launcher (torchrun's equivalent, see docs/launcher.md).
// Parsing stops at the first positional argument: it and everything after it are the workers'
// command line. A command that names a nanoddp subcommand (train, sample, ...) runs this same
// executable; anything else runs as a program found by path or on PATH (torchrun --no-python).
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "cli/nanochat_names.h"
#include "cli/option_flags.h"
#include "core/error.h"
#include "launch/launcher.h"

namespace nanoddp::cli {

namespace {

// The workers run this very binary, even when nanoddp is not on PATH or was started by a relative
// path that a worker's working directory would not resolve.
std::string this_executable() {
  char buf[PATH_MAX];
  // readlink() does not NUL-terminate; the length it returns delimits the path.
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  NANODDP_CHECK(n > 0, "cannot find the nanoddp executable through /proc/self/exe");
  return std::string(buf, size_t(n));
}

// The program that runs `args` under the interpreter for scripts and modules (torchrun runs them
// with its own): --python, else $NANODDP_PYTHON, else python3 on PATH; a name without '/' is looked
// up on PATH. Also sets PYTHONUNBUFFERED=1 for the workers unless the user set it: their output
// reaches the launcher through pipes, where Python would buffer 8 KiB at a time (under torchrun they often
// write to the terminal itself, line by line), so prints would show late, and the last ones before
// a crash or a SIGKILL would be lost from the failure report.
dist::WorkerProgram python_program(const std::string& what, const dist::LaunchOptions& o,
                                   std::vector<std::string> args) {
  const char* env = std::getenv("NANODDP_PYTHON");
  const std::string name = !o.python.empty() ? o.python : env && *env ? env : "python3";
  const std::string source = !o.python.empty() ? "--python" : env && *env ? "NANODDP_PYTHON" : "";
  const std::string py = dist::find_program(name);
  if (source.empty())
    NANODDP_CHECK(!py.empty(), "{} needs python3, which is not on PATH: install it, name an interpreter with "
                  "--python, or give a program and --no_python", what);
  else
    NANODDP_CHECK(!py.empty(), "{} {} is not an executable program{}: give the path of a Python interpreter", source,
                  name, name.find('/') == std::string::npos ? " on PATH" : "");
  ::setenv("PYTHONUNBUFFERED", "1", /*overwrite=*/0);
  args.insert(args.begin(), name);  // the worker's argv[0]
  return {py, args};
}

// nanochat's scripts as torchrun runs them (`-m scripts.base_train -- ARGS`, `python -m
// scripts.base_train ARGS` with --no_python) or by name (`base_train ARGS`) become the nanoddp command
// that does their job, unless scripts/<name>.py is in the working directory (a nanochat checkout:
// Python runs it there, as under torchrun). Returns whether `words` was rewritten.
bool translate_nanochat_script(std::vector<std::string>& words, bool module) {
  const bool python = words.size() >= 3 && (words[0] == "python" || words[0] == "python3") && words[1] == "-m";
  const size_t at = python ? 2 : 0;
  if (words.size() <= at || !is_nanochat_script(words[at])) return false;
  const std::string name = words[at].starts_with("scripts.") ? words[at].substr(8) : words[at];
  const bool as_module = module || python || name != words[at];
  std::error_code ec;
  if (as_module && std::filesystem::is_regular_file("scripts/" + name + ".py", ec)) return false;
  std::string note;
  words = *translate_nanochat_command({words.begin() + at, words.end()}, &note);
  if (as_module)
    fmt::print(stderr, "nanoddp run: scripts.{} is nanochat's script, and scripts/{}.py is not in this directory: "
               "the workers run `nanoddp {}`\n", name, name, fmt::join(words, " "));
  if (!note.empty()) fmt::print(stderr, "nanoddp run: {}\n", note);
  return true;
}

// The workers' program from the words after the flags. Like torchrun: a .py script (or any file
// with --run_path) runs under python3, -m runs a module, --no_python runs the word as a program;
// otherwise a nanoddp subcommand runs this executable and anything else is a program on PATH.
dist::WorkerProgram worker_program(const CLI::App& root, std::vector<std::string> words,
                                   const dist::LaunchOptions& o) {
  // A leading "--" only separates the launcher's flags from the workers' command.
  if (!words.empty() && words.front() == "--") words.erase(words.begin());
  NANODDP_CHECK(!words.empty(), "nanoddp run needs the command the workers run, e.g. `nanoddp run "
                "--nproc_per_node 2 train ...`");
  const std::string first = words.front();  // a copy: words grows below
  NANODDP_CHECK(!first.starts_with("-"), "unknown flag '{}' for nanoddp run (see nanoddp run --help)", first);
  NANODDP_CHECK(first != "run", "nanoddp run cannot launch workers that run `nanoddp run` themselves");
  NANODDP_CHECK(int(o.module) + int(o.no_python) + int(o.run_path) <= 1, "--module, --no_python and --run_path each "
                "say how to run the command; give one of them");
  if (translate_nanochat_script(words, o.module)) {
    words.insert(words.begin(), "nanoddp");  // the worker's argv[0]
    return {this_executable(), words};
  }
  if (o.module) {
    words.insert(words.begin(), "-m");
    return python_program("-m " + first, o, words);
  }
  if (!o.no_python && (o.run_path || first.ends_with(".py"))) {
    std::error_code ec;
    NANODDP_CHECK(std::filesystem::is_regular_file(first, ec), "the script {} does not exist (relative paths start "
                  "from the directory nanoddp run was started in)", first);
    return python_program(first, o, words);
  }

  std::string subcommands;
  // An empty filter lists every subcommand (the overload without one lists only those parsed).
  for (const CLI::App* sub : root.get_subcommands(std::function<bool(const CLI::App*)>())) {
    const auto& aliases = sub->get_aliases();
    if (!o.no_python &&
        (sub->get_name() == first || std::find(aliases.begin(), aliases.end(), first) != aliases.end())) {
      // The worker's argv[0].
      words.insert(words.begin(), "nanoddp");
      return {this_executable(), words};
    }
    if (sub->get_name() != "run") subcommands += (subcommands.empty() ? "" : ", ") + sub->get_name();
  }
  // Not a subcommand: run it as a program (torchrun --no-python), by path or through PATH.
  std::string path = dist::find_program(first);
  std::error_code ec;
  NANODDP_CHECK(!path.empty(), "'{}' is neither a nanoddp subcommand ({}) nor an executable program {}{}",
                first, subcommands, first.find('/') == std::string::npos ? "on PATH" : "at that path",
                std::filesystem::is_regular_file(first, ec) ? fmt::format("; to run the file {} with an interpreter, "
                "name it (`nanoddp run ... python3 {}`), or give --run_path for a Python script", first, first) : "");
  return {path, words};
}

}  // namespace

void add_run_command(CLI::App& root) {
  auto opts = std::make_shared<dist::LaunchOptions>();
  auto* cmd = root.add_subcommand("run", "Launch workers on this node, torchrun-style: nanoddp run [flags] "
                                         "<subcommand or program> [args]");
  add_option_flags(*cmd, *opts);
  // Without "--", prefix_command() stops parsing at the first positional word and leaves it and
  // everything after it in remaining(). CLI11 hands the words after a "--" back to the parent app
  // unless this subcommand has a positional to fill, so `command` takes them, and only them: its
  // validator refuses words unless a "--" came first (CLI11 keeps the "--" in remaining()).
  cmd->prefix_command();
  auto after_dashes = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *after_dashes, "the workers' command line (subcommand or program, then its arguments)")
      ->check(CLI::Validator(
          [cmd](std::string&) {
            auto seen = cmd->remaining();
            return std::find(seen.begin(), seen.end(), "--") != seen.end() ? std::string() : std::string("no --");
          },
          "", ""));
  // A word the validator refuses is not taken by `command`; it stays in remaining().
  cmd->validate_positionals();
  cmd->callback([cmd, opts, after_dashes, &root] {
    // Words after a "--" went to `command`; without one, prefix_command() left them in remaining().
    dist::WorkerProgram program = worker_program(root, after_dashes->empty() ? cmd->remaining() : *after_dashes, *opts);
    int status = dist::run_launcher(*opts, program);
    if (status != 0) throw CLI::RuntimeError(status);  // main() returns it without printing more
  });
}

}  // namespace nanoddp::cli
