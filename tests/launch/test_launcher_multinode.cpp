// The launcher across nodes: the rendezvous protocol over an in-memory store (ranks by node order,
// a taken node rank, mismatched --nnodes, the first failure report), bad multi-node flags, and
// several `nanoddp run` processes forming one job, on one host and on two (network namespaces):
// failures on one node restart or stop the others, a lost launcher or store ends the job.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "launch/launcher_plan.h"
#include "launch/launcher_rendezvous.h"
#include "launcher_test_util.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/tcp_store.h"
#include "subprocess.h"
#include "test_util.h"
#include "two_hosts.h"

namespace nanoddp::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::env_by_rank;
using testing::expect_all_gone;
using testing::free_port;
using testing::launch;
using testing::lines_by_rank;
using testing::Proc;
using testing::TwoHosts;
using testing::wait_for_pids;

// ---------------------------------------------------------------------------------------------
// The rendezvous protocol on its own.

TEST(LauncherPieces, RendezvousAssignsRanksByNodeOrder) {
  auto store = std::make_shared<HashStore>();
  std::vector<int> nprocs = {2, 3, 1};
  std::vector<Membership> got(3);
  std::vector<std::thread> nodes;
  for (int k = 0; k < 3; k++)
    nodes.emplace_back([&, k] {
      LauncherRendezvous rdzv(store, k, 3, 10s);
      got[size_t(k)] = rdzv.join(0, NodeRecord{3, nprocs[size_t(k)], "host" + std::to_string(k), 100 + k});
    });
  for (auto& t : nodes) t.join();
  for (auto& m : got) {
    ASSERT_EQ(m.nodes.size(), 3u);
    EXPECT_EQ(m.world_size(), 6);
    EXPECT_EQ(m.first_rank(0), 0);
    EXPECT_EQ(m.first_rank(1), 2);
    EXPECT_EQ(m.first_rank(2), 5);
    EXPECT_EQ(m.nodes[1].host, "host1");
  }
}

TEST(LauncherPieces, RendezvousRejectsATakenNodeRankAndMismatchedNnodes) {
  auto store = std::make_shared<HashStore>();
  LauncherRendezvous first(store, 1, 2, 1s), second(store, 1, 2, 1s), node0(store, 0, 3, 1s);
  std::thread t([&] { EXPECT_THROW(first.join(0, NodeRecord{2, 1, "a", 1}), Error); });  // node 0 never comes
  t.join();
  NANODDP_EXPECT_ERROR(second.join(0, NodeRecord{2, 1, "b", 2}),
                       "--node_rank 1 is already taken by the launcher on a (pid 1)");
  // Node 0 says 3 nodes, node 1 said 2.
  store->set_string("attempt0/node2", R"({"nnodes":3,"nproc":1,"host":"c","pid":3})");
  NANODDP_EXPECT_ERROR(node0.join(0, NodeRecord{3, 1, "z", 9}), "--nnodes");
  // Every node must restart as often and beat as often as the others (an older launcher's record,
  // without them, is not held against it).
  auto fresh = std::make_shared<HashStore>();
  LauncherRendezvous a(fresh, 0, 2, 1s);
  fresh->set_string("attempt0/node1", R"({"nnodes":2,"nproc":1,"host":"b","pid":2,"max_restarts":3,)"
                                      R"("monitor_interval_ms":500})");
  NodeRecord mine{2, 1, "a", 1};
  mine.max_restarts = 0;
  mine.monitor_interval_ms = 500;
  NANODDP_EXPECT_ERROR(a.join(0, mine),
                       "node 1 (b) was started with --max_restarts 3 but node 0 with --max_restarts 0");
  mine.max_restarts = 3;
  mine.monitor_interval_ms = 5000;
  fresh->set_string("attempt2/node1", R"({"nnodes":2,"nproc":1,"host":"b","pid":2,"max_restarts":3,)"
                                      R"("monitor_interval_ms":500})");
  NANODDP_EXPECT_ERROR(a.join(2, mine), "--monitor_interval 0.5 but node 0 with --monitor_interval 5");
  fresh->set_string("attempt3/node1", R"({"nnodes":2,"nproc":1,"host":"b","pid":2})");
  EXPECT_EQ(a.join(3, mine).world_size(), 2);
}

TEST(LauncherPieces, FirstFailureReportWinsAndDoneCounts) {
  auto store = std::make_shared<HashStore>();
  LauncherRendezvous a(store, 0, 2, 1s), b(store, 1, 2, 1s);
  EXPECT_FALSE(a.failure(0).has_value());
  FailureReport ra{0, "ha", 1, 1, 11, "exited with code 3", {"x"}, true};
  FailureReport rb{1, "hb", 2, 0, 22, "was killed by SIGKILL", {}, true};
  EXPECT_EQ(b.report_failure(0, rb).rank, 2);
  EXPECT_EQ(a.report_failure(0, ra).rank, 2);  // b was first
  EXPECT_EQ(a.failure(0)->headline(), "rank 2 (local 0 on hb, pid 22) was killed by SIGKILL");
  EXPECT_FALSE(a.failure(1).has_value());  // attempts are separate
  a.report_done(1);
  EXPECT_FALSE(b.all_done(1));
  b.report_done(1);
  EXPECT_TRUE(a.all_done(1));
}

// ---------------------------------------------------------------------------------------------
// Bad input across nodes: no master to reach, a node rank out of range or taken.

TEST(Launcher, UnreachableMasterTimesOut) {
  int port = free_port();
  auto start = Clock::now();
  Proc p(launch({"--nnodes", "2", "--node_rank", "1", "--master_port", std::to_string(port), "--rdzv_timeout", "1"},
                {}));
  ASSERT_EQ(p.wait_exit(), 1) << p.all();
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_NE(p.err().find(fmt::format("could not reach the rendezvous store at 127.0.0.1:{} after 1 s", port)),
            std::string::npos)
      << p.err();
}

TEST(Launcher, NodeRankOutOfRangeOrTaken) {
  Proc bad(launch({"--nnodes", "2", "--node_rank", "2"}, {}));
  ASSERT_EQ(bad.wait_exit(), 1);
  EXPECT_NE(bad.err().find("--node_rank 2 is out of range for --nnodes 2: use 0..1"), std::string::npos) << bad.err();

  // Nodes 0 and 1 of 3 wait for node 2; a second node 1 is turned away at once.
  int port = free_port();
  auto node = [&](int rank) {
    return launch({"--nnodes", "3", "--node_rank", std::to_string(rank), "--master_port", std::to_string(port),
                   "--rdzv_timeout", "30"},
                  {});
  };
  Proc n0(node(0)), n1(node(1));
  // Wait until node 1's registration is in node 0's store.
  TcpStore probe(TcpStoreOptions{"127.0.0.1", port, 10s, 10s, ""});
  auto deadline = Clock::now() + 20s;
  while (!probe.check({"nanoddp_run/attempt0/node1"}) && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  Proc dup(node(1));
  ASSERT_EQ(dup.wait_exit(), 1) << dup.all();
  EXPECT_NE(dup.err().find("--node_rank 1 is already taken by the launcher on "), std::string::npos)
      << dup.err();
  ::kill(n0.pid(), SIGINT);
  ::kill(n1.pid(), SIGINT);
  EXPECT_EQ(n0.wait_exit(10s), 130);
  EXPECT_EQ(n1.wait_exit(10s), 130);
}

// ---------------------------------------------------------------------------------------------
// Several launchers end to end, on one host and on two.

// Checks the env lines of a two-node job: node K ran ranks 2K, 2K+1 with world size 4.
void expect_two_node_env(Proc& node, int node_rank, const std::string& master_addr) {
  auto env = env_by_rank(node.out());
  ASSERT_EQ(env.size(), 2u) << node.all();
  for (int local = 0; local < 2; local++) {
    int rank = 2 * node_rank + local;
    ASSERT_TRUE(env.count(rank)) << node.all();
    auto& v = env[rank];
    EXPECT_EQ(v["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(v["WORLD_SIZE"], "4");
    EXPECT_EQ(v["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(v["GROUP_RANK"], std::to_string(node_rank));
    EXPECT_EQ(v["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(v["MASTER_ADDR"], master_addr);
  }
  auto stores = lines_by_rank(node.out(), "store ok");
  EXPECT_EQ(stores.size(), 2u) << node.all();
  for (auto& [rank, lines] : stores) EXPECT_EQ(lines.front(), "world 4");
}

std::vector<std::string> node_flags(int node_rank, const std::string& addr, int port) {
  return {"--nnodes", "2", "--node_rank", std::to_string(node_rank), "--master_addr", addr, "--master_port",
          std::to_string(port), "--nproc_per_node", "2", "--monitor_interval", "0.1", "--rdzv_timeout", "30"};
}

TEST(LauncherMultiNode, TwoLaunchersOnOneHost) {
  int port = free_port();
  Proc n1(launch(node_flags(1, "127.0.0.1", port), {"--env", "--store"}));  // node 1 may start first
  Proc n0(launch(node_flags(0, "127.0.0.1", port), {"--env", "--store"}));
  ASSERT_EQ(n0.wait_exit(), 0) << n0.all();
  ASSERT_EQ(n1.wait_exit(), 0) << n1.all();
  expect_two_node_env(n0, 0, "127.0.0.1");
  expect_two_node_env(n1, 1, "127.0.0.1");
}

// The local addresses (hex, as /proc/net/tcp and tcp6 write them) of the sockets listening on `port`.
std::vector<std::string> listening_on(int port) {
  std::vector<std::string> out;
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const size_t colon = local.rfind(':');
      if (state == "0A" && colon != std::string::npos && std::stoi(local.substr(colon + 1), nullptr, 16) == port)
        out.push_back(local.substr(0, colon));
    }
  }
  return out;
}

// Two launchers on one host with a loopback --master_addr: the store listens on loopback only (was:
// every interface, since there are several nodes), and the launchers, each of which sized its
// workers' threads from every core, are warned that together they run twice as many.
TEST(LauncherMultiNode, TwoLaunchersOnOneHostKeepTheStoreOnLoopbackAndAreWarnedOfSharedCores) {
  const int cores = int(::sysconf(_SC_NPROCESSORS_ONLN));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  auto flags = [&](int rank, int port) {
    auto f = node_flags(rank, "127.0.0.1", port);
    f[9] = "1";  // --nproc_per_node 1: each worker gets every core (the user set no OMP_NUM_THREADS)
    return f;
  };
  ASSERT_EQ(flags(0, 1)[8], "--nproc_per_node");
  const int port = free_port();
  Proc n0(launch(flags(0, port), {"--pid", "--sleep", "60"})), n1(launch(flags(1, port), {"--pid", "--sleep", "60"}));
  wait_for_pids(n0, 1);
  wait_for_pids(n1, 1);
  EXPECT_EQ(listening_on(port), std::vector<std::string>{"0100007F"}) << "127.0.0.1 only";
  ::kill(n0.pid(), SIGTERM);
  ::kill(n1.pid(), SIGTERM);
  n0.wait_exit(60s);
  n1.wait_exit(60s);
  // Each worker runs the cores this process may use (its affinity); the host has `cores`. Said when
  // fewer threads each would help (not when one thread each is already too many).
  const int usable = usable_cores();
  const std::string warning = fmt::format("the launchers on {} (node(s) 0, 1) run 2 worker(s) with {} threads in all "
                                          "on {} cores", host, 2 * usable, cores);
  const bool oversubscribed = 2 * usable > cores && std::max(1, cores / 2) < usable;
  for (Proc* n : {&n0, &n1})
    EXPECT_EQ(n->err().find(warning) != std::string::npos, oversubscribed) << n->all();
  // --master_bind chooses the interface: every IPv4 one here.
  const int port2 = free_port();
  auto bound = flags(0, port2);
  bound.insert(bound.end(), {"--master_bind", "0.0.0.0"});
  Proc b0(launch(bound, {"--pid", "--sleep", "60"})), b1(launch(flags(1, port2), {"--pid", "--sleep", "60"}));
  wait_for_pids(b0, 1);
  EXPECT_EQ(listening_on(port2), std::vector<std::string>{"00000000"});
  ::kill(b0.pid(), SIGTERM);
  ::kill(b1.pid(), SIGTERM);
  b0.wait_exit(60s);
  b1.wait_exit(60s);
}

TEST(LauncherMultiNode, AFailureOnOneNodeRestartsBoth) {
  int port = free_port();
  std::vector<std::string> worker = {"--env", "--fail_rank", "3", "--fail_until_restart", "1", "--store"};
  auto flags = [&](int rank) {
    auto f = node_flags(rank, "127.0.0.1", port);
    f.insert(f.end(), {"--max_restarts", "1"});
    return f;
  };
  Proc n0(launch(flags(0), worker)), n1(launch(flags(1), worker));
  ASSERT_EQ(n0.wait_exit(), 0) << n0.all();
  ASSERT_EQ(n1.wait_exit(), 0) << n1.all();
  for (Proc* n : {&n0, &n1}) {
    // Both launchers print the same root cause (rank 3, on node 1) and restart.
    EXPECT_NE(n->err().find("rank 3 (local 1 on "), std::string::npos) << n->all();
    EXPECT_NE(n->err().find("restarting every worker (restart 1 of --max_restarts 1)"), std::string::npos);
    for (auto& [rank, v] : env_by_rank(n->out())) EXPECT_EQ(v["NANODDP_RESTART_COUNT"], "1") << rank;
  }
  expect_two_node_env(n0, 0, "127.0.0.1");
  expect_two_node_env(n1, 1, "127.0.0.1");
}

TEST(LauncherMultiNode, AFailureOnNodeOneStopsNodeZero) {
  int port = free_port();
  std::vector<std::string> worker = {"--pid", "--store", "--exit_rank", "2", "--exit_code", "5", "--sleep", "60"};
  Proc n0(launch(node_flags(0, "127.0.0.1", port), worker)), n1(launch(node_flags(1, "127.0.0.1", port), worker));
  auto pids0 = wait_for_pids(n0, 2);
  ASSERT_EQ(n1.wait_exit(20s), 1) << n1.all();
  ASSERT_EQ(n0.wait_exit(20s), 1) << n0.all();
  EXPECT_NE(n0.err().find("rank 2 (local 0 on "), std::string::npos) << n0.all();
  EXPECT_NE(n0.err().find("exited with code 5"), std::string::npos) << n0.all();
  expect_all_gone(pids0, "node 0's worker");
}

TEST(LauncherMultiNode, ALostLauncherEndsTheJob) {
  int port = free_port();
  std::vector<std::string> worker = {"--pid", "--sleep", "60"};
  Proc n0(launch(node_flags(0, "127.0.0.1", port), worker)), n1(launch(node_flags(1, "127.0.0.1", port), worker));
  auto pids0 = wait_for_pids(n0, 2), pids1 = wait_for_pids(n1, 2);
  ::kill(n1.pid(), SIGKILL);  // node 1 vanishes: its workers die with it (PR_SET_PDEATHSIG), nothing tells node 0
  ASSERT_EQ(n0.wait_exit(20s), 1) << n0.all();
  EXPECT_NE(n0.err().find("the launcher on node 1 ("), std::string::npos) << n0.all();
  EXPECT_NE(n0.err().find("sent no heartbeat for 5 s"), std::string::npos) << n0.all();
  expect_all_gone(pids0, "node 0's worker");
  expect_all_gone(pids1, "node 1's worker");
}

TEST(LauncherMultiNode, LosingNodeZeroStopsTheOthers) {
  int port = free_port();
  std::vector<std::string> worker = {"--pid", "--sleep", "60"};
  Proc n0(launch(node_flags(0, "127.0.0.1", port), worker)), n1(launch(node_flags(1, "127.0.0.1", port), worker));
  auto pids0 = wait_for_pids(n0, 2), pids1 = wait_for_pids(n1, 2);
  ::kill(n0.pid(), SIGKILL);  // the store goes with it
  ASSERT_EQ(n1.wait_exit(20s), 1) << n1.all();
  EXPECT_NE(n1.err().find("lost the connection to the rendezvous store at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << n1.all();
  EXPECT_NE(n1.err().find("(node 1 stopped its workers)"), std::string::npos) << n1.all();
  expect_all_gone(pids0, "node 0's worker");
  expect_all_gone(pids1, "node 1's worker");
}

// Ctrl-C to node 1: it exits 130, and node 0 stops within 15 s (well inside --rdzv_timeout) with
// node 1's cause, which includes `why`.
void ctrl_c_on_node_one_stops_node_zero(Proc& n0, Proc& n1, const std::string& why) {
  const auto start = Clock::now();
  ::kill(n1.pid(), SIGINT);
  ASSERT_EQ(n1.wait_exit(20s), 130) << n1.all();
  ASSERT_EQ(n0.wait_exit(20s), 1) << n0.all();
  EXPECT_LT(Clock::now() - start, 15s) << n0.all();
  EXPECT_NE(n0.err().find("the launcher on node 1 ("), std::string::npos) << n0.all();
  EXPECT_NE(n0.err().find(why), std::string::npos) << n0.all();
}

// Ctrl-C on a node waiting at the join for a node that has not come: the nodes already there stop
// at once with its cause. Was: it exited alone, and they waited for both until --rdzv_timeout.
TEST(LauncherMultiNode, CtrlCWhileWaitingForTheOtherNodesStopsThoseAlreadyThere) {
  int port = free_port();
  auto flags = [&](int rank) {
    auto f = node_flags(rank, "127.0.0.1", port);
    f[1] = "3";  // --nnodes 3: node 2 never comes
    return f;
  };
  ASSERT_EQ(flags(0)[0], "--nnodes");
  Proc n0(launch(flags(0), {"--sleep", "60"})), n1(launch(flags(1), {"--sleep", "60"}));
  TcpStore probe(TcpStoreOptions{"127.0.0.1", port, 20s, 20s, ""});
  auto deadline = Clock::now() + 20s;
  while (!probe.check({"nanoddp_run/attempt0/node0", "nanoddp_run/attempt0/node1"}) && Clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ctrl_c_on_node_one_stops_node_zero(n0, n1, "was interrupted by SIGINT while it waited for the other nodes");
}

// Ctrl-C on node 1 while it stops a failed attempt's workers ends the job there; node 0, already
// waiting to restart, stops too. Was: node 0 waited for node 1 until --rdzv_timeout (30 s here).
TEST(LauncherMultiNode, CtrlCWhileStoppingAFailedAttemptStopsTheOtherNodesAtOnce) {
  int port = free_port();
  // Rank 2 (node 1) fails 1 s in; every worker ignores SIGTERM, so node 1 waits out its long
  // --stop_timeout while node 0 stops its own within 1 s and goes on to restart 1's join.
  std::vector<std::string> worker = {"--ignore_term", "--fail_rank", "2", "--fail_until_restart", "5", "--fail_delay",
                                     "1", "--sleep", "60"};
  auto flags = [&](int rank, const char* stop_timeout) {
    auto f = node_flags(rank, "127.0.0.1", port);
    f.insert(f.end(), {"--max_restarts", "3", "--stop_timeout", stop_timeout});
    return f;
  };
  Proc n0(launch(flags(0, "1"), worker)), n1(launch(flags(1, "30"), worker));
  ASSERT_TRUE(n1.wait_for_text("failing on restart 0")) << n1.all();
  std::this_thread::sleep_for(2s);
  // Followed by "while it stopped the failed attempt's workers", unless the signal came first.
  ctrl_c_on_node_one_stops_node_zero(n0, n1, "was interrupted by SIGINT");
  EXPECT_NE(n0.err().find("job stopped"), std::string::npos) << n0.all();
}

// Ctrl-C on node 1 reaches node 0 through the store, and node 0's workers get the time to save too
// (their save takes 6 s): every rank of a job saves together. Was: node 0 stopped its workers as
// after a failure, SIGKILL after 5 s, in the middle of their save.
TEST(LauncherMultiNode, CtrlCOnOneNodeGivesEveryNodesWorkersTheTimeToSave) {
  int port = free_port();
  std::vector<std::string> worker = {"--pid", "--save_on_signal", "6", "--sleep", "120"};
  Proc n0(launch(node_flags(0, "127.0.0.1", port), worker)), n1(launch(node_flags(1, "127.0.0.1", port), worker));
  auto pids0 = wait_for_pids(n0, 2);
  wait_for_pids(n1, 2);
  ::kill(n1.pid(), SIGINT);
  ASSERT_EQ(n1.wait_exit(90s), 130) << n1.all();
  ASSERT_EQ(n0.wait_exit(90s), 1) << n0.all();
  EXPECT_EQ(lines_by_rank(n1.out(), "saved after").size(), 2u) << n1.all();
  auto saved0 = lines_by_rank(n0.out(), "saved after");
  ASSERT_EQ(saved0.size(), 2u) << n0.all();
  for (auto& [rank, lines] : saved0) EXPECT_EQ(lines, std::vector<std::string>{"SIGTERM"}) << "rank " << rank;
  for (Proc* n : {&n0, &n1}) EXPECT_EQ(n->err().find("SIGKILL"), std::string::npos) << n->all();
  EXPECT_NE(n0.err().find("the launcher on node 1 ("), std::string::npos) << n0.all();
  EXPECT_NE(n0.err().find("received a stop from another node; stopping 2 worker(s) with SIGTERM"), std::string::npos)
      << n0.all();
  expect_all_gone(pids0, "node 0's worker");
}

// Node 0's launcher stopped (SIGSTOP: its store accepts but never answers), then Ctrl-C on node 1:
// node 1 gives up on the store within a heartbeat's timeout and ends as interrupted. Was: deaf to
// the signal until its store request's 120 s ran out.
TEST(LauncherMultiNode, CtrlCWhileNodeZeroIsStoppedEndsWithinTheHeartbeatTimeout) {
  int port = free_port();
  std::vector<std::string> worker = {"--pid", "--sleep", "60"};
  Proc n0(launch(node_flags(0, "127.0.0.1", port), worker)), n1(launch(node_flags(1, "127.0.0.1", port), worker));
  auto pids0 = wait_for_pids(n0, 2), pids1 = wait_for_pids(n1, 2);
  ::kill(n0.pid(), SIGSTOP);
  std::this_thread::sleep_for(500ms);  // node 1's next heartbeat now waits on the silent store
  const auto start = Clock::now();
  ::kill(n1.pid(), SIGINT);
  ASSERT_EQ(n1.wait_exit(30s), 130) << n1.all();
  EXPECT_LT(Clock::now() - start, 20s) << n1.all();  // the 5 s request timeout and the workers' stop
  expect_all_gone(pids1, "node 1's worker");
  ::kill(n0.pid(), SIGKILL);
  ::kill(n0.pid(), SIGCONT);
  n0.wait_exit(20s);
  expect_all_gone(pids0, "node 0's worker");
}

// Node 1's stdout is a pipe whose reader waits 8 s, past the 5 s heartbeat timeout, while node 1's
// workers print far more than a pipe holds: its launcher blocks in write(), as a paused terminal or
// a stalled `| less` would block it, and the workers block on their own pipes in turn. The job
// must go on once the reader drains the pipe. Was: the heartbeat came from the loop that relays the
// output, so node 0 ended the job with "sent no heartbeat".
TEST(LauncherMultiNode, AConsoleThatTakesNoOutputForAWhileDoesNotLoseTheNode) {
  int port = free_port();
  std::vector<std::string> worker = {"--store", "--lines", "20000"};
  Proc n0(launch(node_flags(0, "127.0.0.1", port), worker));
  std::vector<std::string> slow_reader = {"/bin/bash", "-c", "set -o pipefail; \"$@\" | { sleep 8; cat; }", "bash"};
  for (std::string& a : launch(node_flags(1, "127.0.0.1", port), worker)) slow_reader.push_back(a);
  Proc n1(slow_reader);
  ASSERT_EQ(n1.wait_exit(60s), 0) << n1.all();
  ASSERT_EQ(n0.wait_exit(60s), 0) << n0.all();
  for (Proc* n : {&n0, &n1}) {
    auto lines = lines_by_rank(n->out(), "line");
    EXPECT_EQ(lines.size(), 2u) << n->err();
    for (auto& [rank, got] : lines) EXPECT_EQ(got.size(), 20000u) << "rank " << rank;
  }
}

TEST_F(TwoHosts, OneLauncherPerHostRunsTheJob) {
  const int port = 29611;  // each namespace has its own ports: nothing else can hold this one
  Proc n0(on_host(0, launch(node_flags(0, addr(0), port), {"--env", "--store"})));
  Proc n1(on_host(1, launch(node_flags(1, addr(0), port), {"--env", "--store"})));
  ASSERT_EQ(n0.wait_exit(), 0) << n0.all();
  ASSERT_EQ(n1.wait_exit(), 0) << n1.all();
  expect_two_node_env(n0, 0, addr(0));
  expect_two_node_env(n1, 1, addr(0));
}

TEST_F(TwoHosts, UnreachableMasterOnTheOtherHost) {
  // Nothing listens on host 0: host 1's launcher gives up after --rdzv_timeout.
  Proc n1(on_host(1, launch({"--nnodes", "2", "--node_rank", "1", "--master_addr", addr(0), "--master_port", "29612",
                             "--rdzv_timeout", "1"},
                            {})));
  ASSERT_EQ(n1.wait_exit(), 1) << n1.all();
  EXPECT_NE(n1.err().find("could not reach the rendezvous store at 10.123.0.1:29612 after 1 s"), std::string::npos)
      << n1.err();
}

}  // namespace
}  // namespace nanoddp::dist
