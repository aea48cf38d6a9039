// The nanoddp binary: one executable, one subcommand per job. Errors a user can act on
// (nanoddp::Error) end as one line on stderr and exit status 1.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "nanoddp/build_config.h"

int main(int argc, char** argv) {
  CLI::App app{"nanoddp: data-parallel GPT training in C++ (CPU and CUDA)", "nanoddp"};
  app.require_subcommand(1);
  app.set_version_flag("--version", NANODDP_VERSION);
  using namespace nanoddp::cli;
  add_info_command(app);
  add_train_command(app);
  add_sample_command(app);
  add_export_commands(app);
  add_tokenizer_command(app);
  add_data_command(app);
  add_run_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const nanoddp::Error& e) {
    if (nanoddp::log::world_size() > 1)
      std::fprintf(stderr, "nanoddp: error: [rank %d] %s\n", nanoddp::log::rank(), e.what());
    else
      std::fprintf(stderr, "nanoddp: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
