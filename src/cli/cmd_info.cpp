// nanoddp info: what this build has (engines, versions) and what the machine offers.
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/device.h"
#include "nanoddp/build_config.h"

namespace nanoddp::cli {

void add_info_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("info", "Print the build configuration and the devices found");
  cmd->callback([] {
    fmt::print("nanoddp {} ({} build, {})\n", NANODDP_VERSION, NANODDP_BUILD_TYPE, NANODDP_CXX_COMPILER);
    // 0/1 from the generated build_config.h: what this binary can use, whatever the machine has.
    fmt::print("engines: cuda={} nccl={} mpi={} gloo={}\n", NANODDP_HAVE_CUDA, NANODDP_HAVE_NCCL, NANODDP_HAVE_MPI,
               NANODDP_HAVE_GLOO);
    fmt::print("cuda devices: {}\n", cuda_device_count());
  });
}

}  // namespace nanoddp::cli
