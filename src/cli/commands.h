// Each subcommand of the `nanoddp` binary lives in its own cmd_*.cpp and adds itself to the root
// CLI11 app through one of these functions (called from main.cpp).
//
// A command keeps its option storage in a shared_ptr that its callback captures: CLI11 binds flags
// to references, and the callback runs during app.parse(), after the add_* function has returned.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/options.h"

namespace nanoddp::cli {

void add_train_command(CLI::App& root);      // nanoddp train
void add_sft_command(CLI::App& root);        // nanoddp sft
void add_rl_command(CLI::App& root);         // nanoddp rl
void add_task_command(CLI::App& root);       // nanoddp task
void add_eval_command(CLI::App& root);       // nanoddp eval
void add_report_command(CLI::App& root);     // nanoddp report
void add_chat_command(CLI::App& root);       // nanoddp chat
void add_serve_command(CLI::App& root);      // nanoddp serve
void add_sample_command(CLI::App& root);     // nanoddp sample
void add_export_commands(CLI::App& root);    // nanoddp export / import
void add_data_command(CLI::App& root);       // nanoddp data prepare
void add_tokenizer_command(CLI::App& root);  // nanoddp tokenizer train|encode|decode
void add_run_command(CLI::App& root);        // nanoddp run (the launcher)
void add_env_command(CLI::App& root);        // nanoddp env (alias: info)

// The sampling flags of sample, chat and eval, checked before a model is loaded.
void check_sampling_flags(int64_t max_tokens, double temperature, int64_t top_k);

// The flags of one section of the options (train/options.h), e.g. rl's: the flags only `nanoddp rl`
// takes, which train and sft remove.
template <typename Section>
std::vector<std::string> section_flags(Section section) {
  std::vector<std::string> flags;
  section.visit([&](auto&, const char* name, const char*) { flags.push_back(std::string("--") + name); });
  return flags;
}

// sft and rl: the model shape flags, recipe, dataset and initial weights of the checkpoint `source`
// (a checkpoint directory or a run's --out) go into `o`; returns the options the source recorded
// (an empty object for an import).
nlohmann::json take_source_model(train::TrainOptions& o, const std::string& source);
// sft and rl: the chat stage's defaults of the source's recipe for the flags `cmd` was not given
// (train::apply_chat_recipe_defaults).
void apply_source_recipe(train::TrainOptions& o, const CLI::App& cmd, const nlohmann::json& source_options);
void remove_flags(CLI::App& cmd, const std::vector<std::string>& flags);

// Trains `opts` in this process as one rank of whatever launched it (nanoddp run, torchrun-style
// variables, mpirun, srun, or alone): what `train` and the chat stages run.
void run_train_command(const train::TrainOptions& opts);

}  // namespace nanoddp::cli
