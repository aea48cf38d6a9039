// Each subcommand of the `nanoddp` binary lives in its own cmd_*.cpp and adds itself to the root
// CLI11 app through one of these functions (called from main.cpp).
//
// A command keeps its option storage in a shared_ptr that its callback captures: CLI11 binds flags
// to references, and the callback runs during app.parse(), after the add_* function has returned.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

#include "train/options.h"

namespace nanoddp::cli {

void add_train_command(CLI::App& root);      // nanoddp train
void add_sft_command(CLI::App& root);        // nanoddp sft
void add_task_command(CLI::App& root);       // nanoddp task
void add_eval_command(CLI::App& root);       // nanoddp eval
void add_chat_command(CLI::App& root);       // nanoddp chat
void add_sample_command(CLI::App& root);     // nanoddp sample
void add_export_commands(CLI::App& root);    // nanoddp export / import
void add_data_command(CLI::App& root);       // nanoddp data prepare
void add_tokenizer_command(CLI::App& root);  // nanoddp tokenizer train|encode|decode
void add_run_command(CLI::App& root);        // nanoddp run (the launcher)
void add_info_command(CLI::App& root);       // nanoddp info

// The sampling flags of sample, chat and eval, checked before a model is loaded.
void check_sampling_flags(int64_t max_tokens, double temperature, int64_t top_k);

// Trains `opts` in this process as one rank of whatever launched it (nanoddp run, torchrun-style
// variables, mpirun, srun, or alone): what `train` and the chat stages run.
void run_train_command(const train::TrainOptions& opts);

}  // namespace nanoddp::cli
