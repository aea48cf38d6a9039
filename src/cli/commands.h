// Each subcommand of the `nanoddp` binary lives in its own cmd_*.cpp and adds itself to the root
// CLI11 app through one of these functions (called from main.cpp).
//
// A command keeps its option storage in a shared_ptr that its callback captures: CLI11 binds flags
// to references, and the callback runs during app.parse(), after the add_* function has returned.
#pragma once

#include <CLI/CLI.hpp>

namespace nanoddp::cli {

void add_train_command(CLI::App& root);      // nanoddp train
void add_sample_command(CLI::App& root);     // nanoddp sample
void add_export_commands(CLI::App& root);    // nanoddp export / import
void add_data_command(CLI::App& root);       // nanoddp data prepare
void add_tokenizer_command(CLI::App& root);  // nanoddp tokenizer train|encode|decode
void add_run_command(CLI::App& root);        // nanoddp run (the launcher)
void add_info_command(CLI::App& root);       // nanoddp info

}  // namespace nanoddp::cli
