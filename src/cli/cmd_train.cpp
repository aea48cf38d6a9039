// nanoddp train: nanochat's base_train as one command. Works as a single process, under
// `nanoddp run`, torchrun-style environments, mpirun and srun (see comm/init.h).
#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "cli/rank_setup.h"
#include "core/options.h"
#include "train/recipe_options.h"
#include "train/trainer.h"
#include "train/validate.h"

namespace nanoddp::cli {

void run_train_command(const train::TrainOptions& opts) {
  // Bad flag values fail here, before any rendezvous, identically on every rank.
  train::validate_options(opts);
  check_output_path("--out", opts.output.out, PathKind::Directory);
  const RankSetup rank = join_process_group(opts.runtime.device, opts.runtime.backend, opts.runtime.timeout);
  const train::TrainResult r = train::run_training(opts, *rank.context->group, rank.device);
  // Stopped by SIGTERM/SIGINT after saving: exit as a process killed by it would (128 + signal),
  // so launchers and schedulers see that the run did not finish.
  if (r.stopped_by_signal != 0) throw CLI::RuntimeError(128 + r.stopped_by_signal);
}

namespace {

// The struct holds the classic recipe's values of the flags whose defaults differ by recipe, and
// train::apply_recipe_defaults gives a 2026 run its own; --help shows the default recipe's (2026)
// value first and classic's beside it, so it never shows a value the default run does not use.
void show_recipe_defaults(CLI::App& cmd) {
  const train::TrainOptions classic;
  train::TrainOptions r2026;
  train::apply_recipe_defaults(r2026, true, [](const std::string&) { return false; });
  const nlohmann::json a = options_to_json(r2026), b = options_to_json(classic);
  const auto text = [](const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); };
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (b.at(it.key()) == it.value()) continue;
    const std::string shown = fmt::format("{} (classic: {})", text(it.value()), text(b.at(it.key())));
    cmd.get_option("--" + it.key())->default_str(shown);
  }
}

}  // namespace

void add_train_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("train", "Train a GPT (nanochat's recipe) on prepared token shards");
  auto opts = std::make_shared<train::TrainOptions>();
  add_option_flags(*cmd, *opts);
  show_recipe_defaults(*cmd);
  remove_flags(*cmd, section_flags(train::RlOptions{}));
  cmd->callback([cmd, opts] {
    // Epochs count passes over the data, so with --num_epochs a step is one micro-step unless
    // --total_batch_size is given (its default, nanochat's 524288 tokens, is larger than a small text).
    if (opts->batch.num_epochs > 0 && cmd->get_option("--total_batch_size")->count() == 0)
      opts->batch.total_batch_size = -1;
    train::apply_recipe_defaults(*opts, opts->model.recipe == model::Recipe::R2026,
                                 [&](const std::string& flag) { return cmd->get_option("--" + flag)->count() > 0; });
    run_train_command(*opts);
  });
}

}  // namespace nanoddp::cli
