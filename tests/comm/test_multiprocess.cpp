// Real multi-process jobs: N copies of comm_worker started with the launcher's environment (as
// `nanoddp run` and torchrun do) or by mpirun, joined through init_distributed: every collective
// over TCP between processes, a stalled, a crashed and a frozen rank making the others fail with a
// diagnosis in bounded time, and mismatched arguments stopping every rank.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>

#include "nanoddp/build_config.h"
#include "rendezvous/tcp_store.h"
#include "subprocess.h"
#include "test_util.h"
#include "two_hosts.h"

namespace nanoddp::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::free_port;
using testing::Proc;

// Starts argv with these variables on top of this process's environment, capturing its output. A
// Proc cannot move (its reader thread points at it), hence the pointer.
std::unique_ptr<Proc> spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& vars) {
  std::vector<std::string> env;
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return std::make_unique<Proc>(argv, env);
}

// The exit status after at most `limit`, or -1 if still running (the process is killed when its Proc
// goes away). This and launch are unused in a build without Gloo and MPI (the GPU machines').
[[maybe_unused]] int exit_status(Proc& p, std::chrono::milliseconds limit) { return p.wait_exit(limit).value_or(-1); }

// Starts `world` workers as the launcher would; returns them running.
[[maybe_unused]] std::vector<std::unique_ptr<Proc>> launch(int world, const std::string& scenario,
                                                           const std::string& backend, double timeout_s) {
  int port = free_port();
  std::vector<std::unique_ptr<Proc>> procs;
  for (int r = 0; r < world; r++) {
    std::map<std::string, std::string> env{{"RANK", std::to_string(r)},          {"WORLD_SIZE", std::to_string(world)},
                                           {"LOCAL_RANK", std::to_string(r)},    {"LOCAL_WORLD_SIZE", std::to_string(world)},
                                           {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", std::to_string(port)},
                                           {"NANODDP_TEST_TIMEOUT", fmt::format("{}", timeout_s)}};
    procs.push_back(spawn({NANODDP_COMM_WORKER, scenario, backend}, env));
  }
  return procs;
}

#if NANODDP_HAVE_GLOO

TEST(MultiProcess, GlooCollectivesAcrossProcesses) {
  for (int world : {2, 3}) {
    auto procs = launch(world, "collectives", "auto", 60);
    for (auto& p : procs) {
      EXPECT_EQ(exit_status(*p, 120s), 0) << p->all();
      EXPECT_NE(p->all().find(": ok (gloo, rank"), std::string::npos) << p->all();
    }
  }
}

// The last rank stops (stall) or exits (crash) after collective #1; the others must fail on #2
// within the timeout plus the diagnosis, naming the collective and the rank.
void expect_diagnosed(const std::string& scenario, const std::string& state) {
  constexpr int kWorld = 3;
  auto start = Clock::now();
  // A 5 s timeout: the diagnosis watches the heartbeats for 3 intervals (timeout / 10 each), and
  // with 2 s a heartbeat thread starved for 0.6 s by parallel tests read as "stopped".
  auto procs = launch(kWorld, scenario, "gloo", 5.0);
  for (int r = 0; r + 1 < kWorld; r++) {
    Proc& p = *procs[r];
    EXPECT_EQ(exit_status(p, 30s), 3) << p.all();
    const std::string log = p.all();
    EXPECT_NE(log.find("allreduce #2 of 1.0 MiB (f32, sum)"), std::string::npos) << log;
    // Only rank 2 is named (a crashed rank may die before publishing #1, so its number is not checked).
    EXPECT_NE(log.find("rank 2 had not reached it (rank 2: its last collective was #"), std::string::npos) << log;
    EXPECT_NE(log.find(state), std::string::npos) << log;
    EXPECT_NE(log.find("rank 2 may have crashed or stalled; see its output"), std::string::npos) << log;
  }
  EXPECT_LT(Clock::now() - start, 25s) << "the failure was not reported in bounded time";
}  // the stalled rank is killed here, with its Proc

// Under `nanoddp run`, a rank dies while a large allreduce is in flight on both ranks. The
// launcher reports the death in the store at once; the surviving rank, which would otherwise wait
// in the collective (or in its diagnosis, 4.5 heartbeat intervals of 2 s here) and be killed at
// the launcher's 5 s stop timeout, stops by itself with a line naming the dead rank (Note [known
// departures] in comm/collective_watch.h), so the launcher need not send SIGKILL.
TEST(MultiProcess, UnderTheLauncherARankBlockedOnADeadPeerStopsNamingIt) {
  std::vector<std::string> env{"NANODDP_TEST_TIMEOUT=30"};
  Proc job({testing::nanoddp_binary(), "run", "--standalone", "--nproc_per_node", "2", NANODDP_COMM_WORKER, "die",
            "gloo"},
           env);
  EXPECT_NE(exit_status(job, 60s), 0) << job.all();
  const std::string log = job.all();
  EXPECT_NE(log.find("rank 1: dying inside collective #2"), std::string::npos) << log;
  EXPECT_NE(log.find("allreduce #2 of 64.0 MiB (f32, sum)"), std::string::npos) << log;
  EXPECT_NE(log.find("on rank 0: rank 1 (pid "), std::string::npos) << log;
  EXPECT_NE(log.find("exited with code 7, as the launcher reports: see its output"), std::string::npos) << log;
  EXPECT_EQ(log.find("SIGKILL"), std::string::npos) << "the surviving rank had to be killed:\n" << log;
}

TEST(MultiProcess, StalledRankIsNamedByTheOthers) { expect_diagnosed("stall", "it is still running"); }

TEST(MultiProcess, CrashedRankIsNamedByTheOthers) { expect_diagnosed("crash", "its heartbeat stopped"); }

// The last rank freezes (SIGSTOP) inside collective #2, after its progress said #2: every rank had
// reached it, and the others must name the frozen one by its stopped heartbeat. Was: "every rank had
// reached it ... check the network".
TEST(MultiProcess, ARankFrozenInsideTheCollectiveIsNamedByTheOthers) {
  constexpr int kWorld = 3;
  auto start = Clock::now();
  auto procs = launch(kWorld, "freeze", "gloo", 5.0);  // 5 s: see expect_diagnosed
  for (int r = 0; r + 1 < kWorld; r++) {
    Proc& p = *procs[r];
    EXPECT_EQ(exit_status(p, 40s), 3) << p.all();
    const std::string log = p.all();
    EXPECT_NE(log.find("allreduce #2 of 1.0 MiB (f32, sum)"), std::string::npos) << log;
    EXPECT_NE(log.find("every rank had reached it, but rank 2 stopped sending heartbeats: it died or froze in it"),
              std::string::npos)
        << log;
    EXPECT_EQ(log.find("check the network"), std::string::npos) << log;
  }
  const std::string frozen = procs[kWorld - 1]->all();
  EXPECT_NE(frozen.find("freezing inside collective #2"), std::string::npos) << frozen;
  EXPECT_LT(Clock::now() - start, 30s) << "the failure was not reported in bounded time";
}  // the frozen rank is killed here, with its Proc

TEST(MultiProcess, MismatchedArgumentsStopEveryRank) {
  auto procs = launch(3, "consistency", "gloo", 30);
  std::vector<std::string> logs;
  for (auto& p : procs) {
    const int status = exit_status(*p, 60s);
    logs.push_back(p->all());
    EXPECT_EQ(status, 4) << logs.back();
  }
  EXPECT_NE(logs[1].find("[rank 1] --depth is 6 on rank 1 but 4 on rank 0: start every rank with the same arguments"),
            std::string::npos)
      << logs[1];
  EXPECT_NE(logs[0].find("rank 1 has settings that differ from rank 0's (see its error)"), std::string::npos)
      << logs[0];
  EXPECT_NE(logs[2].find("rank 1 has settings that differ from rank 0's"), std::string::npos) << logs[2];
}

// A rank started with another WORLD_SIZE stops at once, naming both values. Was: "unexpected
// gloo::EnforceNotMet ... this is likely a bug in nanoddp". (Rank 0 waits for the missing peers
// until its connect timeout; it is not waited for here.)
TEST(MultiProcess, AnotherWorldSizeOnOneRankIsNamed) {
  const int port = free_port();
  auto env = [&](int rank, int world) {
    return std::map<std::string, std::string>{{"RANK", std::to_string(rank)},  {"WORLD_SIZE", std::to_string(world)},
                                              {"MASTER_ADDR", "127.0.0.1"},   {"MASTER_PORT", std::to_string(port)},
                                              {"NANODDP_TEST_TIMEOUT", "30"}};
  };
  auto rank0 = spawn({NANODDP_COMM_WORKER, "collectives", "gloo"}, env(0, 2));
  auto rank1 = spawn({NANODDP_COMM_WORKER, "collectives", "gloo"}, env(1, 3));
  EXPECT_EQ(exit_status(*rank1, 60s), 3) << rank1->all();
  EXPECT_NE(rank1->all().find("WORLD_SIZE is 3 on rank 1 but 2 on rank 0"), std::string::npos) << rank1->all();
}

// Processes started by torchrun with its own store at MASTER_PORT (a server stands in for it) stop
// at once, every rank with the one line that says what to do. Was: rank 0 "port ... already in use".
TEST(MultiProcess, WorkersOfTorchrunsOwnStoreStopWithWhatToDo) {
  TcpStoreServer torchruns(TcpStoreServerOptions{"127.0.0.1", 0, ""});
  std::vector<std::unique_ptr<Proc>> procs;
  for (int r = 0; r < 2; r++) {
    std::map<std::string, std::string> env{{"RANK", std::to_string(r)},
                                           {"WORLD_SIZE", "2"},
                                           {"MASTER_ADDR", "127.0.0.1"},
                                           {"MASTER_PORT", std::to_string(torchruns.port())},
                                           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                           {"NANODDP_TEST_TIMEOUT", "30"}};
    procs.push_back(spawn({NANODDP_COMM_WORKER, "collectives", "auto"}, env));
  }
  for (auto& p : procs) {
    EXPECT_EQ(exit_status(*p, 20s), 3) << p->all();
    EXPECT_NE(p->all().find("nanoddp: error: torchrun serves its own store at MASTER_PORT "
                            "(TORCHELASTIC_USE_AGENT_STORE=True), which nanoddp cannot join: launch with "
                            "`nanoddp run`"),
              std::string::npos)
        << p->all();
    EXPECT_EQ(p->all().find("already in use"), std::string::npos) << p->all();
  }
}

// Two network namespaces joined by a veth pair act as two hosts with their own addresses: the
// ranks must find each other through MASTER_ADDR, with Gloo bound to the address that leads there
// (not loopback). Needs root and `ip netns`; skipped with the reason otherwise.
TEST(MultiProcess, GlooAcrossTwoNetworkNamespaces) {
  testing::TwoHostNetwork hosts;  // declared first: removed after the workers are gone
  if (!hosts.create()) return;
  std::vector<std::unique_ptr<Proc>> procs;
  for (int r = 0; r < 2; r++) {
    std::map<std::string, std::string> env{{"RANK", std::to_string(r)},      {"WORLD_SIZE", "2"},
                                           {"LOCAL_RANK", "0"},              {"LOCAL_WORLD_SIZE", "1"},
                                           {"GROUP_RANK", std::to_string(r)}, {"MASTER_ADDR", hosts.addr(0)},
                                           {"MASTER_PORT", "29400"},         {"NANODDP_TEST_TIMEOUT", "60"}};
    procs.push_back(spawn(hosts.on_host(r, {NANODDP_COMM_WORKER, "collectives", "gloo"}), env));
  }
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(exit_status(*procs[r], 120s), 0) << procs[r]->all();
    EXPECT_NE(procs[r]->all().find(fmt::format("rank {}: ok (gloo, rank {} of 2 (local 0 of 1, node {})", r, r, r)),
              std::string::npos)
        << procs[r]->all();
  }
}

#endif  // NANODDP_HAVE_GLOO

#if NANODDP_HAVE_MPI

// mpirun, when installed: the worker finds its rank from Open MPI's environment and picks the mpi
// backend by itself (no MASTER_ADDR).
std::string mpirun_or_skip() {
  auto r = testing::run_command("command -v mpirun");
  return r.status == 0 ? "mpirun --allow-run-as-root --oversubscribe" : "";
}

TEST(MultiProcess, MpiCollectivesUnderMpirun) {
  std::string mpirun = mpirun_or_skip();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  for (int world : {2, 3}) {
    auto r = testing::run_command(fmt::format("NANODDP_TEST_TIMEOUT=60 timeout 180 {} -np {} {} collectives auto",
                                              mpirun, world, NANODDP_COMM_WORKER));
    EXPECT_EQ(r.status, 0) << r.output;
    for (int rank = 0; rank < world; rank++)
      EXPECT_NE(r.output.find(fmt::format("rank {}: ok (mpi, rank {} of {}", rank, rank, world)), std::string::npos)
          << r.output;
  }
}

TEST(MultiProcess, MpiStalledRankEndsTheJobWithADiagnosis) {
  std::string mpirun = mpirun_or_skip();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  auto start = Clock::now();
  auto r = testing::run_command(
      fmt::format("NANODDP_TEST_TIMEOUT=2 timeout 60 {} -np 2 {} stall mpi", mpirun, NANODDP_COMM_WORKER));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "the job hung until `timeout` killed it:\n" << r.output;
  EXPECT_NE(r.output.find("allreduce #2 of 1.0 MiB (f32, sum) timed out after 2 s on rank 0: rank 1 had not "
                          "reached it"),
            std::string::npos)
      << r.output;
  EXPECT_LT(Clock::now() - start, 40s);
}

#endif  // NANODDP_HAVE_MPI

}  // namespace
}  // namespace nanoddp::dist
