// nanoddp train: nanochat's base_train as one command. Works as a single process, under
// `nanoddp run`, torchrun-style environments, mpirun and srun (see comm/init.h).
#include "cli/commands.h"
#include "cli/option_flags.h"
#include "comm/init.h"
#include "train/trainer.h"
#include "train/validate.h"

namespace nanoddp::cli {

void run_train_command(const train::TrainOptions& opts) {
  // Bad flag values fail here, before any rendezvous, identically on every rank.
  train::validate_options(opts);
  // The launcher's, torchrun's, mpirun's or srun's variables give rank and world size; without any,
  // this is a single process.
  const dist::DistEnv env = dist::discover_environment();
  // --device cuda means this rank's GPU (by LOCAL_RANK), not cuda:0.
  const Device device = dist::local_device(opts.device, env);
  dist::DistOptions d;
  d.backend = opts.backend;
  // One --timeout bounds both the rendezvous and every collective.
  d.collective_timeout = opts.timeout;
  d.rendezvous_timeout = opts.timeout;
  // ctx holds the store (and its server on the hosting rank) and the group; it must outlive training.
  auto ctx = dist::init_distributed(d, device, env);
  const train::TrainResult r = train::run_training(opts, *ctx->group, device);
  // Stopped by SIGTERM/SIGINT after saving: exit as a process killed by it would (128 + signal),
  // so launchers and schedulers see that the run did not finish.
  if (r.stopped_by_signal != 0) throw CLI::RuntimeError(128 + r.stopped_by_signal);
}

void add_train_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("train", "Train a GPT (nanochat's recipe) on prepared token shards");
  auto opts = std::make_shared<train::TrainOptions>();
  add_option_flags(*cmd, *opts);
  cmd->callback([opts] { run_train_command(*opts); });
}

}  // namespace nanoddp::cli
