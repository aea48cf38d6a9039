// The nanoddp binary: one executable, one subcommand per job. Errors a user can act on
// (nanoddp::Error) end as one line on stderr and exit status 1.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "nanoddp/build_config.h"

int main(int argc, char** argv) {
  CLI::App app{"nanoddp: data-parallel GPT training in C++ (CPU and CUDA)", "nanoddp"};
  // Exactly one: a bare `nanoddp` is a usage error that prints the help hint.
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
  // Other exceptions are not expected (user and environment errors are nanoddp::Error): they escape
  // to std::terminate, which aborts where a debugger or core dump shows it.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // ParseError also covers --help, --version and the CLI::RuntimeError by which `nanoddp run` passes
    // on the workers' exit status: app.exit() prints what each needs (nothing for RuntimeError) and
    // returns its exit code.
    return app.exit(e);
  } catch (const nanoddp::Error& e) {
    // The rank is known once comm/init has run; before that this is rank 0 of 1.
    if (nanoddp::log::world_size() > 1)
      std::fprintf(stderr, "nanoddp: error: [rank %d] %s\n", nanoddp::log::rank(), e.what());
    else
      std::fprintf(stderr, "nanoddp: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
