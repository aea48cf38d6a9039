// The launcher's flags checked and resolved into what this node will do (LaunchPlan), and the
// environment each worker gets from it. Everything here runs before any process is started, so a
// bad flag ends the launcher with one clear line and nothing to clean up.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launch/launcher.h"
#include "launch/launcher_output.h"

namespace nanoddp::dist {

struct LaunchPlan {
  int nproc = 1;       // workers on this node
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;  // 0 with --standalone: node 0 picks one
  bool standalone = false;
  int max_restarts = 0;
  std::chrono::milliseconds monitor_interval{500}, rdzv_timeout{300000};
  std::optional<std::chrono::milliseconds> stop_timeout;  // nullopt: auto (Note [a stop that saves])
  // Where each local rank's output goes (index: local rank); log_dir is the folder of this launch,
  // "" when no rank writes files.
  std::vector<OutputRouting> routing;
  std::string log_dir;
  std::string rdzv_id = "none";  // TORCHELASTIC_RUN_ID
  std::string role = "default";  // ROLE_NAME
  std::string host;                  // this machine's name, for reports
  std::optional<int> omp_threads;    // OMP_NUM_THREADS for the workers when the user set none
  // Where node 0's store listens: "localhost" (loopback only), "" (every interface), the address
  // the user gave as --master_addr, or --master_bind (see make_launch_plan).
  std::string store_host;
  bool store_host_given = false;     // from --master_bind (its errors name the flag)
  std::string store_token;           // NANODDP_STORE_TOKEN of the job ("" = none)
  bool store_token_generated = false;  // made up by this launcher: the workers must be given it
  std::string job_id;                  // NANODDP_JOB_ID: the same for every attempt of this launch
  // Whether node 0's store listens on every interface (reachable from other hosts).
  bool store_on_every_interface() const {
    return store_host.empty() || store_host == "0.0.0.0" || store_host == "::";
  }
  // OMP_NUM_THREADS as the workers will see it: the launcher's, or the user's when it is a number;
  // 0 when unknown.
  int threads_per_worker() const;
};

// Checks the flags and resolves them. Throws nanoddp::Error naming the flag that is wrong.
LaunchPlan make_launch_plan(const LaunchOptions& options);

// --redirects / --tee: "B" for every local rank, or "L:B,L:B" per local rank (unlisted ranks: 0),
// B in 0..3 (1 stdout, 2 stderr). Returns one value per local rank; throws nanoddp::Error naming
// `flag` on anything else.
std::vector<int> parse_stream_map(const std::string& spec, const char* flag, int nproc);

// Who one worker is, for its environment.
struct WorkerIdentity {
  int rank = 0, local_rank = 0, world_size = 1, local_world_size = 1;
  int attempt = 0;  // restart count
  std::string master_addr;
  int master_port = 0;  // the workers' MASTER_PORT: not the store's (Note [two ports] in launcher.cpp)
  int store_port = 0;   // where the launchers' store listens on master_addr
};

// The variables the launcher sets for a worker, as (name, value) pairs (the contract in
// docs/launcher.md).
std::vector<std::pair<std::string, std::string>> worker_variables(const LaunchPlan& plan, const WorkerIdentity& id);

// `base` ("KEY=VALUE" entries, e.g. the launcher's environ) with `vars` set, replacing any entry of
// the same name.
std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::vector<std::pair<std::string, std::string>>& vars);

// Cores this process may run on (its CPU affinity), at least 1.
int usable_cores();

// One line for each variable of `environ` ("KEY=VALUE" entries) that a PyTorch or nanochat user may
// set expecting an effect that nanoddp's workers do not give, saying what does.
std::vector<std::string> environment_notices(const std::vector<std::string>& environ);

}  // namespace nanoddp::dist
