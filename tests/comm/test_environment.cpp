// Rank discovery from each launcher's environment, and Slurm host lists.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "comm/environment.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

EnvLookup fake(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(Environment, NothingSetIsOneProcess) {
  DistEnv d = discover_environment(fake({}));
  EXPECT_EQ(d.launcher, Launcher::None);
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.local_world_size, 1);
  EXPECT_TRUE(d.master_addr.empty());
  EXPECT_EQ(d.master_port, 0);
}

TEST(Environment, TorchrunContract) {
  DistEnv d = discover_environment(fake({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                         {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.1.2.3"},
                                         {"MASTER_PORT", "29501"}, {"NANODDP_RESTART_COUNT", "2"}}));
  EXPECT_EQ(d.launcher, Launcher::Torchrun);
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 4);
  EXPECT_EQ(d.node_rank, 1);
  EXPECT_EQ(d.master_addr, "10.1.2.3");
  EXPECT_EQ(d.master_port, 29501);
  EXPECT_TRUE(d.master_from_env);
  EXPECT_EQ(d.restart_count, 2);
  EXPECT_EQ(d.describe(), "rank 5 of 8 (local 1 of 4, node 1), launched by torchrun, master 10.1.2.3:29501, restart 2");
}

// Under `nanoddp run` the launcher's store is at its own port, not MASTER_PORT (Note [two ports]).
TEST(Environment, TheLaunchersStorePortIsReadApartFromMasterPort) {
  EXPECT_EQ(discover_environment(fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29501"}})).agent_store_port,
            0);
  DistEnv d = discover_environment(
      fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29501"}, {"NANODDP_AGENT_STORE_PORT", "41000"}}));
  EXPECT_EQ(d.master_port, 29501);
  EXPECT_EQ(d.agent_store_port, 41000);
  NANODDP_EXPECT_ERROR(
      discover_environment(fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"NANODDP_AGENT_STORE_PORT", "0"}})),
      "NANODDP_AGENT_STORE_PORT=0 is out of range");
}

TEST(Environment, TorchelasticRestartCountIsAccepted) {
  DistEnv d = discover_environment(fake({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "3"}}));
  EXPECT_EQ(d.restart_count, 3);
  // Without LOCAL_*, one node holds every rank.
  EXPECT_EQ(d.local_rank, 0);
  EXPECT_EQ(d.local_world_size, 1);
}

TEST(Environment, OpenMpi) {
  // OMPI_COMM_WORLD_NODE_RANK is the place on the node (here 0), not the node (was taken as it).
  DistEnv d = discover_environment(fake({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                         {"OMPI_COMM_WORLD_NODE_RANK", "0"}}));
  EXPECT_EQ(d.launcher, Launcher::Mpirun);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.local_rank, 0);
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.node_rank, 1);
  EXPECT_TRUE(d.master_addr.empty());  // mpirun gives no rendezvous address
}

TEST(Environment, TorchrunVariablesWinOverMpirun) {
  DistEnv d = discover_environment(fake({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"},
                                         {"OMPI_COMM_WORLD_SIZE", "2"}}));
  EXPECT_EQ(d.launcher, Launcher::Torchrun);
  EXPECT_EQ(d.rank, 1);
}

TEST(Environment, Slurm) {
  DistEnv d = discover_environment(fake({{"SLURM_PROCID", "6"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "2"},
                                         {"SLURM_NODEID", "1"}, {"SLURM_TASKS_PER_NODE", "4,3"},
                                         {"SLURM_JOB_NODELIST", "gpu-[07-09,12],login1"}}));
  EXPECT_EQ(d.launcher, Launcher::Srun);
  EXPECT_EQ(d.rank, 6);
  EXPECT_EQ(d.world_size, 7);
  EXPECT_EQ(d.local_rank, 2);
  EXPECT_EQ(d.local_world_size, 3);
  EXPECT_EQ(d.node_rank, 1);
  EXPECT_EQ(d.master_addr, "gpu-07");
  EXPECT_FALSE(d.master_from_env);
  EXPECT_EQ(d.master_port, 0);
}

// srun's step variables describe where this step's tasks run; the job's are the whole allocation's,
// and SLURM_NTASKS_PER_NODE only the --ntasks-per-node maximum. Was: the allocation's first host as
// the master, and the maximum as the local world size.
TEST(Environment, SlurmPrefersTheStepsNodesAndLayout) {
  std::map<std::string, std::string> vars{{"SLURM_PROCID", "4"},
                                          {"SLURM_STEP_ID", "0"},
                                          {"SLURM_NTASKS", "6"},
                                          {"SLURM_LOCALID", "0"},
                                          {"SLURM_NODEID", "1"},
                                          {"SLURM_NTASKS_PER_NODE", "4"},
                                          {"SLURM_TASKS_PER_NODE", "4(x3)"},
                                          {"SLURM_STEP_TASKS_PER_NODE", "4,2"},
                                          {"SLURM_JOB_NODELIST", "gpu-[01-03]"},
                                          {"SLURM_NODELIST", "gpu-[01-03]"},
                                          {"SLURM_STEP_NODELIST", "gpu-[02-03]"}};
  DistEnv d = discover_environment(fake(vars));
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_addr, "gpu-02");
  EXPECT_FALSE(d.master_from_env);
  // Without the step's variables: the allocation's layout, then the maximum; its first host.
  vars.erase("SLURM_STEP_TASKS_PER_NODE");
  vars.erase("SLURM_STEP_NODELIST");
  d = discover_environment(fake(vars));
  EXPECT_EQ(d.local_world_size, 4);
  EXPECT_EQ(d.master_addr, "gpu-01");
  vars["SLURM_TASKS_PER_NODE"] = "4,2";
  EXPECT_EQ(discover_environment(fake(vars)).local_world_size, 2);  // the layout wins over the maximum
  vars.erase("SLURM_TASKS_PER_NODE");
  EXPECT_EQ(discover_environment(fake(vars)).local_world_size, 4);
  vars.erase("SLURM_JOB_NODELIST");
  vars["SLURM_NODELIST"] = "cpu7,cpu8";
  EXPECT_EQ(discover_environment(fake(vars)).master_addr, "cpu7");
  // A step layout without an entry for this node is named.
  vars["SLURM_NODEID"] = "2";
  vars["SLURM_STEP_TASKS_PER_NODE"] = "4,2";
  NANODDP_EXPECT_ERROR(discover_environment(fake(vars)), "SLURM_STEP_TASKS_PER_NODE='4,2' has no entry for node 2");
}

// The batch script of `sbatch -n 2` has SLURM_PROCID=0 and SLURM_NTASKS=2 (Slurm 22.05, seen in
// Srun.ABatchScriptIsNoRank) but no step id: as rank 0 of 2 it would wait for a rank 1 that nothing
// starts. A one-task job's script is a single process; a script of several tasks an error saying how to
// start them. Was: rank 0 of 2, waiting until the rendezvous timeout.
TEST(Environment, ASlurmBatchScriptIsNoSrunTask) {
  const std::map<std::string, std::string> script{{"SLURM_PROCID", "0"},   {"SLURM_NTASKS", "2"},
                                                  {"SLURM_LOCALID", "0"},  {"SLURM_NODEID", "0"},
                                                  {"SLURM_TASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "n1"}};
  NANODDP_EXPECT_ERROR(discover_environment(fake(script)), "batch script", "SLURM_NTASKS=2",
                       "srun nanoddp", "nanoddp run");
  auto one = script;
  one["SLURM_NTASKS"] = "1";
  one["SLURM_TASKS_PER_NODE"] = "1";
  DistEnv d = discover_environment(fake(one));
  EXPECT_EQ(d.launcher, Launcher::None);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_TRUE(d.master_addr.empty());
  // With a step id (either spelling) the same variables are an srun task's.
  for (const char* step : {"SLURM_STEP_ID", "SLURM_STEPID"}) {
    auto task = script;
    task[step] = "0";
    DistEnv t = discover_environment(fake(task));
    EXPECT_EQ(t.launcher, Launcher::Srun) << step;
    EXPECT_EQ(t.world_size, 2) << step;
  }
}

TEST(Environment, SlurmTasksPerNodeRepeats) {
  DistEnv d = discover_environment(fake({{"SLURM_PROCID", "9"}, {"SLURM_STEPID", "3"}, {"SLURM_NTASKS", "10"}, {"SLURM_LOCALID", "1"},
                                         {"SLURM_NODEID", "2"}, {"SLURM_TASKS_PER_NODE", "4(x2),2"},
                                         {"MASTER_ADDR", "head"}, {"MASTER_PORT", "6000"},
                                         {"SLURM_NODELIST", "n[1-3]"}}));
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_addr, "head");  // MASTER_ADDR wins over the node list
  EXPECT_TRUE(d.master_from_env);
  EXPECT_EQ(d.master_port, 6000);
}

TEST(Environment, MalformedValuesAreNamed) {
  NANODDP_EXPECT_ERROR(discover_environment(fake({{"RANK", "1"}})), "RANK is set but WORLD_SIZE is not");
  NANODDP_EXPECT_ERROR(discover_environment(fake({{"WORLD_SIZE", "2"}})), "WORLD_SIZE is set but RANK is not");
  NANODDP_EXPECT_ERROR(discover_environment(fake({{"RANK", "one"}, {"WORLD_SIZE", "2"}})),
                       "RANK='one' is not an integer");
  NANODDP_EXPECT_ERROR(discover_environment(fake({{"RANK", "2"}, {"WORLD_SIZE", "2"}})),
                       "RANK=2 is not below WORLD_SIZE=2");
  NANODDP_EXPECT_ERROR(discover_environment(fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}})),
                       "MASTER_PORT=70000 is out of range");
  NANODDP_EXPECT_ERROR(discover_environment(fake(
                           {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}})),
                       "local rank 3 is not below the local world size 2");
  NANODDP_EXPECT_ERROR(discover_environment(fake({{"SLURM_PROCID", "0"},
                                                  {"SLURM_STEP_ID", "0"},
                                                  {"SLURM_NTASKS", "2"},
                                                  {"SLURM_NODEID", "3"},
                                                  {"SLURM_TASKS_PER_NODE", "1(x2)"}})),
                       "has no entry for node 3");
}

TEST(SlurmNodelist, Expands) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("node[01-04,07],gpu3"), (V{"node01", "node02", "node03", "node04", "node07", "gpu3"}));
  EXPECT_EQ(expand_slurm_nodelist("a"), (V{"a"}));
  EXPECT_EQ(expand_slurm_nodelist("n[8-11]"), (V{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]-c[3,5]"), (V{"r1-c3", "r1-c5", "r2-c3", "r2-c5"}));
  EXPECT_EQ(expand_slurm_nodelist("x[098-101].dc"), (V{"x098.dc", "x099.dc", "x100.dc", "x101.dc"}));
  EXPECT_EQ(first_slurm_host("node[01-04,07],gpu3"), "node01");
  EXPECT_EQ(first_slurm_host("gpu3,node[01-04]"), "gpu3");
  EXPECT_EQ(first_slurm_host("r[2-3]-c[5,1]"), "r2-c5");
}

TEST(SlurmNodelist, MalformedListsAreErrors) {
  EXPECT_THROW(expand_slurm_nodelist("node[01-04"), Error);
  EXPECT_THROW(expand_slurm_nodelist("node01]"), Error);
  EXPECT_THROW(expand_slurm_nodelist("node[4-1]"), Error);
  EXPECT_THROW(expand_slurm_nodelist("node[a-b]"), Error);
  EXPECT_THROW(expand_slurm_nodelist("n[1-100000]", 1000), Error);
  EXPECT_THROW(first_slurm_host(""), Error);
}

}  // namespace
}  // namespace nanoddp::dist
