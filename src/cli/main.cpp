// The nanoddp binary: one executable, one subcommand per job. Every failure ends as one line on
// stderr, "nanoddp: error: ...", and exit status 1 (2 for a command line CLI11 cannot parse;
// `nanoddp run` passes on its workers' status).
// Errors a user can act on are nanoddp::Error, thrown where the cause is known; anything else that
// reaches main() is still reported in one line (see report_unexpected) instead of aborting.
#include <cxxabi.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <typeinfo>
#include <vector>

#include "cli/commands.h"
#include "cli/nanochat_names.h"
#include "cli/suggest.h"
#include "core/error.h"
#include "core/log.h"
#include "nanoddp/build_config.h"

namespace {

// "nanoddp: error: MESSAGE" (with the rank once comm/init has run; before that this is rank 0 of 1).
int report(const std::string& message) {
  nanoddp::log::end_status0();  // a live progress line ends before the error's line
  if (nanoddp::log::world_size() > 1)
    std::fprintf(stderr, "nanoddp: error: [rank %d] %s\n", nanoddp::log::rank(), message.c_str());
  else
    std::fprintf(stderr, "nanoddp: error: %s\n", message.c_str());
  std::fflush(stderr);
  return 1;
}

// The exception's class as C++ spells it, for a report a developer can search the code for.
std::string type_name(const std::exception& e) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? name.get() : typeid(e).name();
}

// Exceptions that escaped the conversion into nanoddp::Error at their source. Each kind still gets
// its likely cause and fix; only the last one is certainly a bug. Rethrown and caught here so that
// main() keeps one catch for all of them.
int report_unexpected() {
  try {
    throw;
  } catch (const std::filesystem::filesystem_error& e) {
    // what() already names the operation and the path(s), e.g. "cannot create directories: Not a
    // directory [/dev/null/x]".
    return report(fmt::format("{}; check that the path exists, is a file or a directory as the command expects, "
                              "and that you may read or write it", e.what()));
  } catch (const nlohmann::json::exception& e) {
    return report(fmt::format("a JSON file nanoddp read is malformed or lacks a field ({}); it may be corrupt or "
                              "from another version of nanoddp: re-create it with the command that writes it",
                              e.what()));
  } catch (const std::bad_alloc&) {
    return report("out of memory; a size given on the command line or read from a file (vocabulary, model, batch) "
                  "is probably larger than this machine can hold: check it, or use smaller settings");
  } catch (const std::system_error& e) {
    return report(fmt::format("a system call failed: {} ({} error {}); check the files, devices and resources "
                              "the command uses", e.what(), e.code().category().name(), e.code().value()));
  } catch (const std::exception& e) {
    return report(fmt::format("unexpected {}: {}; this is likely a bug in nanoddp: please report it with the "
                              "command line", type_name(e), e.what()));
  } catch (...) {
    return report("unexpected exception of unknown type; this is a bug in nanoddp: please report it with the "
                  "command line");
  }
}

// For an unknown flag, the nearest flag of the command it was given to: "; did you mean --depth?".
// CLI11 hands a subcommand's unknown arguments up to its parent, and may fail first on another
// error (a required flag that was mistyped is "required"), so the whole chain of parsed commands is
// searched, for any error.
std::string flag_suggestions(const CLI::App* app) {
  while (app->get_parent() != nullptr) app = app->get_parent();
  std::vector<std::string> flags, unknown;
  for (const CLI::App* a = app; a != nullptr;) {
    for (const CLI::Option* o : a->get_options())
      for (const auto& l : o->get_lnames()) flags.push_back("--" + l);
    for (const auto& extra : a->remaining())
      if (extra.starts_with("--")) unknown.push_back(extra.substr(0, extra.find('=')));
    const auto parsed = a->get_subcommands();
    a = parsed.empty() ? nullptr : parsed.front();
  }
  // nanochat's flags with no equivalent here, and what to do instead.
  static const std::map<std::string, std::string> nanochat = {
      {"--core_metric_every", "nanochat's CORE evaluation is not in nanoddp: evaluate with `nanoddp eval`"},
      {"--core_metric_max_per_task", "nanochat's CORE evaluation is not in nanoddp: evaluate with `nanoddp eval`"},
      {"--model_tag", "checkpoints go to --out (a run folder), not to a tagged folder in a base directory"},
      {"--dry_run", "nanoddp logs nothing to wandb; for a throwaway run give a scratch --out"},
      {"--run", "nanoddp logs nothing to wandb; the run's name is its --out folder (run.json holds its id)"},
      {"--model_step", "checkpoints are folders: give OUT/checkpoints/step_NNNNNN (or a run's --out) as --source"},
      {"--chatcore_every", "ChatCORE is not in nanoddp: score a checkpoint with `nanoddp eval --task ...`"},
      {"--chatcore_max_cat", "ChatCORE is not in nanoddp: score a checkpoint with `nanoddp eval --task ...`"},
      {"--chatcore_max_sample", "ChatCORE is not in nanoddp: score a checkpoint with `nanoddp eval --task ...`"},
      {"--eval_examples", "rl scores no pass@k while it trains: score its checkpoints with `nanoddp eval --task ... "
                          "--num_samples K`"},
      {"--mmlu_epochs", "the SFT mixture is the --data files you give (MMLU and GSM8K are not bundled)"},
      {"--gsm8k_epochs", "the SFT mixture is the --data files you give (MMLU and GSM8K are not bundled)"},
      {"--fp8_recipe", "nanoddp's --fp8 is the tensorwise recipe (nanochat's default) only: drop --fp8_recipe"}};
  // Other trainers' names (PyTorch examples, nanoGPT) for what our flags say in more words.
  static const std::map<std::string, std::string> elsewhere = {
      {"--epochs", "is --num_epochs here (passes over the training split)"},
      {"--batch_size", "is two flags here: --device_batch_size (rows of --max_seq_len tokens per rank in one "
                       "micro-step) and --total_batch_size (tokens per optimizer step over all ranks)"},
      {"--lr", "is three flags here: --matrix_lr (Muon, the blocks' matrices), --embedding_lr and --unembedding_lr "
               "(AdamW); --init_lr_frac scales them all"}};
  std::string out;
  for (const auto& given : unknown) {
    // nanochat and argparse users write --model-tag for --model_tag.
    std::string name = "--" + given.substr(2);
    std::replace(name.begin() + 2, name.end(), '-', '_');
    if (auto it = nanochat.find(name); it != nanochat.end()) {
      out += fmt::format("; {} is nanochat's: {}", given, it->second);
      continue;
    }
    if (auto it = elsewhere.find(name); it != elsewhere.end()) {
      out += fmt::format("; {} {}", given, it->second);
      continue;
    }
    const std::string near = nanoddp::cli::nearest_choice(given, flags);
    if (!near.empty() && near != given) out += fmt::format("; did you mean {} (for {})?", near, given);
  }
  return out;
}

// CLI11 (2.1) lists the words it did not expect in reverse ("8 --batch_size 5 --epochs"); this is
// the same message in the order they were given, from the first command of the chain that kept
// any (as CLI11 checks them: the root first, then each parsed subcommand).
std::string extras_in_order(const CLI::App* app) {
  while (app->get_parent() != nullptr) app = app->get_parent();
  for (const CLI::App* a = app; a != nullptr;) {
    const auto extra = a->remaining(false);
    if (!extra.empty())
      return fmt::format("The following argument{} not expected: {}", extra.size() > 1 ? "s were" : " was",
                         fmt::join(extra, " "));
    const auto parsed = a->get_subcommands();
    a = parsed.empty() ? nullptr : parsed.front();
  }
  return "";
}

// `nanoddp trian ...`: CLI11 alone would say "A subcommand is required". Returns the error line for
// a first argument that is neither a flag nor a command, else "", with the nearest of our commands
// and nanochat's script names (translate_nanochat has taken the exact ones already).
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->check_name(argv[1])) return "";
    names.push_back(sub->get_name());
  }
  for (const auto& name : nanoddp::cli::nanochat_script_names()) names.push_back(name);
  const std::string near = nanoddp::cli::nearest_choice(argv[1], names);
  return fmt::format("unknown command '{}'{}; `nanoddp --help` lists the commands", argv[1],
                     near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near));
}

// `nanoddp chat_cli -p hi` or `nanoddp -m scripts.chat_cli -p hi`: nanochat's names in `words` (the
// whole argv) rewritten to ours (nanochat_names.h). False after the error line for a script or flag
// that has no equivalent here.
bool translate_nanochat(std::vector<std::string>& words) {
  try {
    std::string note;
    if (auto ours = nanoddp::cli::translate_nanochat_command({words.begin() + 1, words.end()}, &note)) {
      words.resize(1);
      words.insert(words.end(), ours->begin(), ours->end());
    }
    if (!note.empty()) std::fprintf(stderr, "nanoddp: %s\n", note.c_str());
    return true;
  } catch (const nanoddp::Error& e) {
    report(e.what());
    return false;
  }
}

// Every single-valued option takes its last value when given twice, as the typed option structs'
// flags already do (option_flags.h) and as argparse does: scripts append overrides. Was: an error
// ("At Most 1 required but received 2") for the flags a command adds by hand, such as sft --source.
void take_last_everywhere(CLI::App* app) {
  for (CLI::Option* o : app->get_options())
    if (o->get_expected_max() == 1 && o->get_type_size_max() == 1 && o->get_items_expected_max() == 1)
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) take_last_everywhere(sub);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nanoddp: data-parallel GPT training in C++ (CPU and CUDA)", "nanoddp"};
  // Set before the subcommands are added: each copies its parent's at creation. Command-line errors
  // then read like every other error ("nanoddp: error: --out is required").
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    // One line, as every other error: CLI11's message, a suggestion, and where the flags are listed
    // (instead of CLI11's second line, "Run with --help for more information.").
    std::string message = e.what();
    message = message.substr(0, message.find('\n'));
    // (CLI11 names an ExtrasError after the command, so its type tells it apart.)
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      if (std::string ordered = extras_in_order(a); !ordered.empty()) message = ordered;
    }
    std::string command = "nanoddp";
    for (const CLI::App* sub = a; sub != nullptr;) {
      const auto parsed = sub->get_subcommands();
      sub = parsed.empty() ? nullptr : parsed.front();
      if (sub != nullptr) command += " " + sub->get_name();
    }
    return fmt::format("nanoddp: error: {}{}; `{} --help` lists the flags\n", message, flag_suggestions(a), command);
  });
  // Exactly one: a bare `nanoddp` is a usage error that prints the help hint.
  app.require_subcommand(1);
  app.set_version_flag("--version", NANODDP_VERSION);
  using namespace nanoddp::cli;
  add_env_command(app);
  add_train_command(app);
  add_sft_command(app);
  add_rl_command(app);
  add_task_command(app);
  add_eval_command(app);
  add_report_command(app);
  add_chat_command(app);
  add_serve_command(app);
  add_sample_command(app);
  add_export_commands(app);
  add_tokenizer_command(app);
  add_data_command(app);
  add_run_command(app);
  take_last_everywhere(&app);
  app.footer(fmt::format("nanochat's script names ({}) run the nanoddp command that does their job, also as "
                         "`nanoddp -m scripts.NAME` and under `nanoddp run` (README: \"Coming from nanochat or "
                         "torchrun\").\n", nanochat_script_list()));
  // nanochat's names rewritten to ours; `words` owns the strings `args` points into.
  std::vector<std::string> words(argv, argv + argc);
  if (!translate_nanochat(words)) return 2;
  std::vector<char*> args;
  for (auto& w : words) args.push_back(w.data());
  argc = static_cast<int>(args.size());
  argv = args.data();
  if (const std::string bad = unknown_command(app, argc, argv); !bad.empty()) {
    report(bad);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // ParseError also covers --help, --version and the CLI::RuntimeError by which `nanoddp run` passes
    // on the workers' exit status: app.exit() prints what each needs (nothing for RuntimeError) and
    // returns its exit code. CLI11 gives each kind of usage error its own code (104-114); scripts
    // expect the usual 2 for "bad command line".
    const int code = app.exit(e);
    return code == 0 || e.get_name() == "RuntimeError" ? code : 2;
  } catch (const nanoddp::Error& e) {
    return report(e.what());
  } catch (...) {
    return report_unexpected();
  }
  return 0;
}
