// Where this process sits in the job, read from the environment its launcher left:
//  - nanoddp run / torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
//    MASTER_ADDR, MASTER_PORT, NANODDP_RESTART_COUNT (TORCHELASTIC_RESTART_COUNT accepted);
//  - mpirun (Open MPI): OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE;
//  - srun (Slurm), a task of a step (SLURM_STEP_ID or SLURM_STEPID set): SLURM_PROCID,
//    SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID; the tasks on this node
//    from SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE (only a
//    maximum); the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST, SLURM_NODELIST) as
//    the master;
//  - nothing, or the batch script of a one-task Slurm job: a single process (the batch script of a
//    job of several tasks is an error: srun starts the ranks).
// The first that applies wins, in that order. MASTER_ADDR / MASTER_PORT, when set, are taken under
// every launcher.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanoddp::dist {

enum class Launcher { None, Torchrun, Mpirun, Srun };
const char* launcher_name(Launcher l);

struct DistEnv {
  Launcher launcher = Launcher::None;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;  // GROUP_RANK / SLURM_NODEID
  std::string master_addr;  // "" when not known
  int master_port = 0;      // 0 when not set
  // NANODDP_AGENT_STORE_PORT: under `nanoddp run`, the port of the launcher's store on MASTER_ADDR,
  // which is not MASTER_PORT (Note [two ports] in launch/launcher.cpp); 0 when not set.
  int agent_store_port = 0;
  bool master_from_env = false;  // MASTER_ADDR was set explicitly (not derived from Slurm's node list)
  int restart_count = 0;

  // "rank 3 of 8 (local 1 of 4, node 1), launched by torchrun, master 10.0.0.1:29500"
  std::string describe() const;
};

// Returns the value of an environment variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_environment();

// Throws nanoddp::Error naming the variable when a value is malformed or inconsistent (RANK without
// WORLD_SIZE, a rank outside the world, a port outside 1-65535).
DistEnv discover_environment(const EnvLookup& env = process_environment());

// Expands a Slurm host list: "node[01-03,07],gpu3" -> node01 node02 node03 node07 gpu3. Ranges
// keep their zero padding; several bracket groups in one name multiply out. Throws nanoddp::Error
// on malformed lists or more than `max_hosts` hosts.
std::vector<std::string> expand_slurm_nodelist(std::string_view list, size_t max_hosts = 1 << 16);
std::string first_slurm_host(std::string_view list);

}  // namespace nanoddp::dist
