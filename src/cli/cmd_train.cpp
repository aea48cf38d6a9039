// nanoddp train: nanochat's base_train as one command. Works as a single process, under
// `nanoddp run`, torchrun-style environments, mpirun and srun (see dist/init.h).
#include "cli/commands.h"
#include "cli/option_flags.h"
#include "dist/process_group.h"
#include "train/trainer.h"

namespace nanoddp::cli {

void add_train_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("train", "Train a GPT (nanochat's recipe) on prepared token shards");
  auto opts = std::make_shared<train::TrainOptions>();
  add_option_flags(*cmd, *opts);
  cmd->callback([opts] {
    auto group = dist::make_single_rank_group(parse_device(opts->device));
    train::run_training(*opts, *group);
  });
}

}  // namespace nanoddp::cli
