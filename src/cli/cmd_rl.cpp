// nanoddp rl: nanochat's chat_rl as one command: on-policy REINFORCE from an SFT (or base)
// checkpoint on questions with verifiable answers (train/rl.h). Questions are strided by rank, each
// sampled --num_samples times with the KV cache, the mean reward all-reduced and logged per step;
// checkpoints, --resume and the learning-rate flags are train's, under every launcher.
#include "cli/commands.h"
#include "cli/option_flags.h"

namespace nanoddp::cli {

void add_rl_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("rl", "Reinforcement learning on questions with answers (nanochat's chat_rl)");
  auto opts = std::make_shared<train::TrainOptions>();
  // chat_rl's settings: one epoch over the questions, 16 questions x 16 samples per step, every
  // learning rate at 5% of base training's, decaying linearly to zero; no evaluation loss (the reward
  // is logged every step; `nanoddp eval` measures accuracy).
  opts->chat.stage = train::RunStage::Rl;
  opts->batch.num_epochs = 1;
  opts->optim.warmdown_ratio = 1.0;
  opts->batch.device_batch_size = 8;
  opts->batch.total_batch_size = -1;
  opts->eval.eval_every = -1;
  opts->optim.init_lr_frac = 0.05;
  add_option_flags(*cmd, *opts);
  remove_flags(*cmd, {"--depth", "--max_seq_len", "--aspect_ratio", "--head_dim", "--n_kv_head", "--recipe", "--window_pattern", "--data", "--conversations", "--val_conversations", "--mask", "--init_from", "--stage",
                      "--total_batch_size", "--eval_every", "--eval_tokens", "--target_flops",
                      "--target_param_data_ratio"});
  auto source = std::make_shared<std::string>();
  cmd->add_option("--source", *source, "The checkpoint to start from: a checkpoint directory or a run's --out")
      ->required();
  cmd->get_option("--device_batch_size")->description("Most sampled rows per forward/backward pass");
  cmd->callback([cmd, opts, source] {
    train::TrainOptions o = *opts;
    apply_source_recipe(o, *cmd, take_source_model(o, *source));
    run_train_command(o);
  });
}

}  // namespace nanoddp::cli
