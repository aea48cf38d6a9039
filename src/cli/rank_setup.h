// What every distributed subcommand (train, sft, eval) does first: find this process's rank from
// the launcher's, torchrun's, mpirun's or srun's variables (none: a single process), pick its
// device (--device cuda means the GPU of LOCAL_RANK, not cuda:0) and join the process group.
#pragma once

#include <memory>
#include <string>

#include "comm/init.h"

namespace nanoddp::cli {

struct RankSetup {
  Device device;
  // The store (and its server on the hosting rank) and the group; must outlive the work.
  std::unique_ptr<dist::DistContext> context;
};

// The device of a command that runs as one process (sample, chat, serve): the same choice and checks
// as a rank's (a GPU asked for where none is visible is a clear error).
inline Device single_process_device(const std::string& device) {
  return dist::local_device(device, dist::DistEnv{});
}

// One timeout bounds both the rendezvous and every collective.
inline RankSetup join_process_group(const std::string& device, dist::BackendKind backend, double timeout_s) {
  const dist::DistEnv env = dist::discover_environment();
  RankSetup r{dist::local_device(device, env), nullptr};
  dist::DistOptions d;
  d.backend = backend;
  d.collective_timeout = timeout_s;
  d.rendezvous_timeout = timeout_s;
  r.context = dist::init_distributed(d, r.device, env);
  return r;
}

}  // namespace nanoddp::cli
