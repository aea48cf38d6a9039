// Real multi-process jobs: N copies of comm_worker started with the launcher's environment (as
// `nanoddp run` and torchrun do) or by mpirun, joined through init_distributed: every collective
// over TCP between processes, a stalled and a crashed rank making the others fail with a diagnosis
// in bounded time, and mismatched arguments stopping every rank.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "rendezvous/tcp_store.h"
#include "nanoddp/build_config.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Proc {
  pid_t pid = -1;
  std::string log;  // stdout and stderr
  int status = -1;  // exit code, 128 + signal, or -1 while running
};

// A port that was free a moment ago.
using nanoddp::testing::free_port;

Proc spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
           const std::string& log) {
  Proc p;
  p.log = log;
  p.pid = fork();
  if (p.pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return p;
}

// Waits up to `limit` for p to exit; kills it after that (status stays -1).
void wait_for(Proc& p, std::chrono::milliseconds limit) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    int st = 0;
    if (waitpid(p.pid, &st, WNOHANG) == p.pid) {
      p.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return;
    }
    std::this_thread::sleep_for(10ms);
  }
  kill(p.pid, SIGKILL);
  waitpid(p.pid, nullptr, 0);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Starts `world` workers as the launcher would; returns them running.
std::vector<Proc> launch(int world, const std::string& scenario, const std::string& backend,
                         const testing::ScratchDir& dir, double timeout_s) {
  int port = free_port();
  std::vector<Proc> procs;
  for (int r = 0; r < world; r++) {
    std::map<std::string, std::string> env{{"RANK", std::to_string(r)},          {"WORLD_SIZE", std::to_string(world)},
                                           {"LOCAL_RANK", std::to_string(r)},    {"LOCAL_WORLD_SIZE", std::to_string(world)},
                                           {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", std::to_string(port)},
                                           {"NANODDP_TEST_TIMEOUT", fmt::format("{}", timeout_s)}};
    procs.push_back(spawn({NANODDP_COMM_WORKER, scenario, backend}, env, dir.str(fmt::format("rank{}.log", r))));
  }
  return procs;
}

#if NANODDP_HAVE_GLOO

TEST(MultiProcess, GlooCollectivesAcrossProcesses) {
  for (int world : {2, 3}) {
    testing::ScratchDir dir(fmt::format("mp_gloo_{}", world));
    auto procs = launch(world, "collectives", "auto", dir, 60);
    for (auto& p : procs) {
      wait_for(p, 120s);
      std::string log = read_file(p.log);
      EXPECT_EQ(p.status, 0) << log;
      EXPECT_NE(log.find(": ok (gloo, rank"), std::string::npos) << log;
    }
  }
}

// The last rank stops (stall) or exits (crash) after collective #1; the others must fail on #2
// within the timeout plus the diagnosis, naming the collective and the rank.
void expect_diagnosed(const std::string& scenario, const std::string& state) {
  constexpr int kWorld = 3;
  testing::ScratchDir dir("mp_" + scenario);
  auto start = Clock::now();
  // A 5 s timeout: the diagnosis watches the heartbeats for 3 intervals (timeout / 10 each), and
  // with 2 s a heartbeat thread starved for 0.6 s by parallel tests read as "stopped".
  auto procs = launch(kWorld, scenario, "gloo", dir, 5.0);
  for (int r = 0; r + 1 < kWorld; r++) {
    wait_for(procs[r], 30s);
    std::string log = read_file(procs[r].log);
    EXPECT_EQ(procs[r].status, 3) << log;
    EXPECT_NE(log.find("allreduce #2 of 1.0 MiB (f32, sum)"), std::string::npos) << log;
    // Only rank 2 is named (a crashed rank may die before publishing #1, so its number is not checked).
    EXPECT_NE(log.find("rank 2 had not reached it (rank 2: its last collective was #"), std::string::npos) << log;
    EXPECT_NE(log.find(state), std::string::npos) << log;
    EXPECT_NE(log.find("rank 2 may have crashed or stalled; see its output"), std::string::npos) << log;
  }
  EXPECT_LT(Clock::now() - start, 25s) << "the failure was not reported in bounded time";
  wait_for(procs[kWorld - 1], 1ms);  // the stalled one is killed here
}

TEST(MultiProcess, StalledRankIsNamedByTheOthers) { expect_diagnosed("stall", "it is still running"); }

TEST(MultiProcess, CrashedRankIsNamedByTheOthers) { expect_diagnosed("crash", "its heartbeat stopped"); }

TEST(MultiProcess, MismatchedArgumentsStopEveryRank) {
  testing::ScratchDir dir("mp_consistency");
  auto procs = launch(3, "consistency", "gloo", dir, 30);
  std::vector<std::string> logs;
  for (auto& p : procs) {
    wait_for(p, 60s);
    logs.push_back(read_file(p.log));
    EXPECT_EQ(p.status, 4) << logs.back();
  }
  EXPECT_NE(logs[1].find("[rank 1] --depth is 6 on rank 1 but 4 on rank 0: start every rank with the same arguments"),
            std::string::npos)
      << logs[1];
  EXPECT_NE(logs[0].find("rank 1 has settings that differ from rank 0's (see its error)"), std::string::npos)
      << logs[0];
  EXPECT_NE(logs[2].find("rank 1 has settings that differ from rank 0's"), std::string::npos) << logs[2];
}

// Two network namespaces joined by a veth pair act as two hosts with their own addresses: the
// ranks must find each other through MASTER_ADDR, with Gloo bound to the address that leads there
// (not loopback). Needs root and `ip netns`; skipped with the reason otherwise.
TEST(MultiProcess, GlooAcrossTwoNetworkNamespaces) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
  const int id = int(getpid() % 200) + 20;
  const std::string ns_a = fmt::format("nddp{}a", getpid()), ns_b = fmt::format("nddp{}b", getpid());
  const std::string veth_a = fmt::format("nda{}", getpid() % 100000), veth_b = fmt::format("ndb{}", getpid() % 100000);
  const std::string addr_a = fmt::format("10.124.{}.1", id), addr_b = fmt::format("10.124.{}.2", id);
  auto sh = [](const std::string& cmd) { return testing::run_command(cmd); };
  auto setup = sh(fmt::format(
      "ip netns add {a} && ip netns add {b} && ip link add {va} type veth peer name {vb} && "
      "ip link set {va} netns {a} && ip link set {vb} netns {b} && "
      "ip -n {a} addr add {aa}/24 dev {va} && ip -n {b} addr add {ab}/24 dev {vb} && "
      "ip -n {a} link set {va} up && ip -n {b} link set {vb} up && "
      "ip -n {a} link set lo up && ip -n {b} link set lo up",
      fmt::arg("a", ns_a), fmt::arg("b", ns_b), fmt::arg("va", veth_a), fmt::arg("vb", veth_b),
      fmt::arg("aa", addr_a), fmt::arg("ab", addr_b)));
  if (setup.status != 0) {
    sh(fmt::format("ip netns del {} 2>/dev/null; ip netns del {} 2>/dev/null", ns_a, ns_b));
    GTEST_SKIP() << "could not create two network namespaces: " << setup.output;
  }
  testing::ScratchDir dir("mp_netns");
  std::vector<Proc> procs;
  for (int r = 0; r < 2; r++) {
    std::map<std::string, std::string> env{{"RANK", std::to_string(r)},      {"WORLD_SIZE", "2"},
                                           {"LOCAL_RANK", "0"},              {"LOCAL_WORLD_SIZE", "1"},
                                           {"GROUP_RANK", std::to_string(r)}, {"MASTER_ADDR", addr_a},
                                           {"MASTER_PORT", "29400"},         {"NANODDP_TEST_TIMEOUT", "60"}};
    procs.push_back(spawn({"/usr/sbin/ip", "netns", "exec", r == 0 ? ns_a : ns_b, NANODDP_COMM_WORKER, "collectives",
                           "gloo"},
                          env, dir.str(fmt::format("rank{}.log", r))));
  }
  for (int r = 0; r < 2; r++) {
    wait_for(procs[r], 120s);
    std::string log = read_file(procs[r].log);
    EXPECT_EQ(procs[r].status, 0) << log;
    EXPECT_NE(log.find(fmt::format("rank {}: ok (gloo, rank {} of 2 (local 0 of 1, node {})", r, r, r)),
              std::string::npos)
        << log;
  }
  sh(fmt::format("ip netns del {}; ip netns del {}", ns_a, ns_b));
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
