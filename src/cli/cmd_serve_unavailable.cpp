// nanoddp serve in a build without cpp-httplib (src/cli/CMakeLists.txt): the command exists and says
// how to get it, instead of being missing from --help without a word.
#include "cli/commands.h"
#include "core/error.h"

namespace nanoddp::cli {

void add_serve_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("serve", "Chat with a checkpoint over HTTP (not in this build: needs cpp-httplib)");
  cmd->allow_extras();
  cmd->callback([] {
    NANODDP_FAIL("this nanoddp was built without cpp-httplib, so it cannot serve: install libcpp-httplib-dev "
                 "(scripts/setup.sh does) and build again");
  });
}

}  // namespace nanoddp::cli
