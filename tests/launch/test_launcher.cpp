// The launcher, `nanoddp run`, tested as users meet it: the real binary starts real worker processes
// (tests/dist/launch_worker.cpp), and the tests read its output, signal it and its workers, and look
// at which processes are left. Also the pieces on their own: flag resolution, environment merging,
// line assembly and the rendezvous protocol over an in-memory store.
//
// Every wait is on a condition (a line of output, a process exit) with a timeout; nothing sleeps a
// fixed time hoping that something happened meanwhile.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/device.h"
#include "core/rng.h"
#include "core/error.h"
#include "rendezvous/hash_store.h"
#include "launch/launcher.h"
#include "launch/launcher_output.h"
#include "launch/launcher_plan.h"
#include "launch/launcher_rendezvous.h"
#include "rendezvous/net.h"
#include "rendezvous/tcp_store.h"
#include "subprocess.h"
#include "test_util.h"
#include "two_hosts.h"

extern char** environ;

namespace nanoddp::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Proc;
using testing::ScratchDir;
using testing::TwoHosts;

const std::string kWorker = LAUNCH_WORKER_PATH;


// `nanoddp run <flags> <kWorker> <worker flags>`
std::vector<std::string> launch(std::vector<std::string> flags, std::vector<std::string> worker_flags) {
  std::vector<std::string> argv = {testing::nanoddp_binary(), "run"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(kWorker);
  argv.insert(argv.end(), worker_flags.begin(), worker_flags.end());
  return argv;
}

// The values after "[rank R]: <key> " on every line that has them, by rank: e.g. key "pid".
std::map<int, std::vector<std::string>> lines_by_rank(const std::string& text, const std::string& key) {
  std::map<int, std::vector<std::string>> out;
  std::regex re("^\\[rank (\\d+)\\]: " + key + " (.*)$");
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, re)) out[std::stoi(m[1])].push_back(m[2]);
  }
  return out;
}

// Waits until `n` ranks have printed "<key> <number>"; returns the numbers by rank.
std::map<int, pid_t> wait_for_pids(Proc& p, int n, const std::string& key = "pid") {
  EXPECT_TRUE(p.wait_for([&](const std::string& s) { return int(lines_by_rank(s, key).size()) >= n; }))
      << "ranks did not print '" << key << "':\n" << p.all();
  std::map<int, pid_t> pids;
  for (auto& [rank, values] : lines_by_rank(p.all(), key)) pids[rank] = std::stoi(values.front());
  return pids;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Whether a process has ended: it no longer exists, or it is a zombie waiting for whoever inherited
// it (init, here) to reap it.
bool dead(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;  // gone meanwhile
  char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

bool gone_within(pid_t pid, std::chrono::milliseconds timeout = 5s) {
  auto deadline = Clock::now() + timeout;
  while (!dead(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

void expect_all_gone(const std::map<int, pid_t>& pids, const char* what) {
  for (auto& [rank, pid] : pids) EXPECT_TRUE(gone_within(pid)) << what << " of rank " << rank << " (pid " << pid << ") is still alive";
}

// The env line of every rank, parsed into name -> value.
std::map<int, std::map<std::string, std::string>> env_by_rank(const std::string& text) {
  std::map<int, std::map<std::string, std::string>> out;
  for (auto& [rank, lines] : lines_by_rank(text, "env"))
    for (auto& line : lines) {
      std::istringstream in(line);
      std::map<std::string, std::string> vars;
      for (std::string kv; in >> kv;) vars[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
      out[rank] = vars;  // the last attempt's line wins
    }
  return out;
}

using nanoddp::testing::free_port;

// ---------------------------------------------------------------------------------------------
// Flags, environment, output assembly and rendezvous on their own.

TEST(LauncherPieces, NprocPerNodeAndNnodes) {
  EXPECT_EQ(resolve_nproc_per_node("3"), 3);
  EXPECT_EQ(resolve_nproc_per_node("cpu"), usable_cores());
  EXPECT_EQ(resolve_nproc_per_node("auto"), std::max(1, cuda_device_count()));
  if (cuda_device_count() == 0) {
    EXPECT_THROW(resolve_nproc_per_node("gpu"), Error);
  }
  for (const char* bad : {"0", "-1", "two", "2x", ""}) EXPECT_THROW(resolve_nproc_per_node(bad), Error) << bad;
  EXPECT_EQ(parse_nnodes("2"), 2);
  EXPECT_EQ(parse_nnodes("3:3"), 3);
  for (const char* bad : {"1:4", "0", "x", "2:"}) EXPECT_THROW(parse_nnodes(bad), Error) << bad;
}

TEST(LauncherPieces, PlanRejectsBadFlags) {
  auto plan_error = [](auto edit) {
    LaunchOptions o;
    edit(o);
    try {
      make_launch_plan(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(plan_error([](LaunchOptions& o) { o.nnodes = "2"; o.node_rank = 2; }).find("--node_rank 2 is out of range"),
            std::string::npos);
  EXPECT_NE(plan_error([](LaunchOptions& o) { o.nnodes = "2"; o.standalone = true; }).find("--standalone"),
            std::string::npos);
  EXPECT_NE(plan_error([](LaunchOptions& o) { o.master_port = 70000; }).find("--master_port"), std::string::npos);
  EXPECT_NE(plan_error([](LaunchOptions& o) { o.redirects = 4; }).find("--redirects"), std::string::npos);
  EXPECT_NE(plan_error([](LaunchOptions& o) { o.monitor_interval = 0; }).find("--monitor_interval"), std::string::npos);
  LaunchOptions o;
  o.rdzv_endpoint = "node0.example:1234";
  LaunchPlan p = make_launch_plan(o);
  EXPECT_EQ(p.master_addr, "node0.example");
  EXPECT_EQ(p.master_port, 1234);
}

TEST(LauncherPieces, EnvironmentMergeReplacesAndKeeps) {
  LaunchPlan plan;
  plan.node_rank = 1;
  plan.nnodes = 2;
  plan.omp_threads = 4;
  WorkerIdentity id{5, 1, 8, 4, 2, "10.0.0.1", 1234};
  auto env = merge_environment({"PATH=/bin", "RANK=99", "HOME=/root"}, worker_variables(plan, id));
  std::map<std::string, std::string> m;
  for (auto& e : env) {
    EXPECT_EQ(m.count(e.substr(0, e.find('='))), 0u) << "duplicate " << e;
    m[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
  }
  EXPECT_EQ(m["PATH"], "/bin");
  EXPECT_EQ(m["HOME"], "/root");
  EXPECT_EQ(m["RANK"], "5");
  EXPECT_EQ(m["LOCAL_RANK"], "1");
  EXPECT_EQ(m["WORLD_SIZE"], "8");
  EXPECT_EQ(m["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(m["GROUP_RANK"], "1");
  EXPECT_EQ(m["ROLE_RANK"], "5");
  EXPECT_EQ(m["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(m["MASTER_PORT"], "1234");
  EXPECT_EQ(m["NANODDP_RESTART_COUNT"], "2");
  EXPECT_EQ(m["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(m["NANODDP_AGENT_STORE"], "1");
  EXPECT_EQ(m["OMP_NUM_THREADS"], "4");
}

TEST(LauncherPieces, RoutingFollowsTorchrunBits) {
  auto r = OutputRouting::from_flags(1, 2, "/logs");  // stdout to files only, stderr to both
  EXPECT_FALSE(r.console[0]);
  EXPECT_TRUE(r.file[0]);
  EXPECT_TRUE(r.console[1]);
  EXPECT_TRUE(r.file[1]);
  r = OutputRouting::from_flags(0, 0, "");
  EXPECT_TRUE(r.console[0] && r.console[1]);
  EXPECT_FALSE(r.any_file());
  r = OutputRouting::from_flags(0, 0, "/logs");  // --log_dir alone tees both streams
  EXPECT_TRUE(r.console[0] && r.console[1] && r.file[0] && r.file[1]);
}

TEST(LauncherPieces, LinesAreReassembledAcrossReads) {
  // Feed 30 lines in pieces of every size from 1 to 7 bytes; the file must hold the same lines and the
  // tail the last ten.
  ScratchDir dir("launcher_lines");
  OutputRouting r = OutputRouting::from_flags(3, 0, dir.str());  // files only, no console
  std::string text;
  for (int i = 0; i < 30; i++) text += "line number " + std::to_string(i) + "\n";
  {
    WorkerOutput out(0, r, dir.str("rank_0.log"));
    size_t pos = 0;
    for (size_t piece = 1; pos < text.size(); piece = piece % 7 + 1) {
      size_t n = std::min(piece, text.size() - pos);
      out.feed(Stream::Out, text.data() + pos, n);
      pos += n;
    }
    out.feed(Stream::Out, "unterminated", 12);
    out.finish(Stream::Out);
    auto tail = out.tail();
    ASSERT_EQ(tail.size(), WorkerOutput::kTailLines);
    EXPECT_EQ(tail.front(), "line number 21");
    EXPECT_EQ(tail.back(), "unterminated");
  }
  EXPECT_EQ(read_file(dir.str("rank_0.log")), text + "unterminated\n");
}

TEST(LauncherPieces, OverlongLinesArePassedOnInPieces) {
  ScratchDir dir("launcher_long_line");
  OutputRouting r = OutputRouting::from_flags(3, 0, dir.str());
  std::string big(WorkerOutput::kMaxLine * 2 + 10, 'x');
  {
    WorkerOutput out(0, r, dir.str("rank_0.log"));
    out.feed(Stream::Err, big.data(), big.size());
    out.finish(Stream::Err);
  }
  std::string want = std::string(WorkerOutput::kMaxLine, 'x') + "\n" + std::string(WorkerOutput::kMaxLine, 'x') +
                     "\n" + std::string(10, 'x') + "\n";
  EXPECT_EQ(read_file(dir.str("rank_0.log")), want);
}

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
  try {
    second.join(0, NodeRecord{2, 1, "b", 2});
    ADD_FAILURE() << "a second node rank 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--node_rank 1 is already taken by the launcher on a (pid 1)"),
              std::string::npos)
        << e.what();
  }
  // Node 0 says 3 nodes, node 1 said 2.
  store->set_string("attempt0/node2", R"({"nnodes":3,"nproc":1,"host":"c","pid":3})");
  try {
    node0.join(0, NodeRecord{3, 1, "z", 9});
    ADD_FAILURE() << "mismatched --nnodes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--nnodes"), std::string::npos) << e.what();
  }
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
// The launcher end to end on one node.

class LauncherEnv : public ::testing::TestWithParam<int> {};

TEST_P(LauncherEnv, EveryWorkerGetsTheContract) {
  int n = GetParam();
  Proc p(launch({"--standalone", "--nproc_per_node", std::to_string(n)}, {"--env", "--store"}));
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  auto env = env_by_rank(p.out());
  ASSERT_EQ(int(env.size()), n) << p.all();
  std::smatch port;
  std::string err = p.err();
  ASSERT_TRUE(std::regex_search(err, port, std::regex("rendezvous store at 127\\.0\\.0\\.1:(\\d+)"))) << err;
  int omp = std::max(1, usable_cores() / n);
  for (int r = 0; r < n; r++) {
    auto& v = env[r];
    EXPECT_EQ(v["RANK"], std::to_string(r));
    EXPECT_EQ(v["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(v["WORLD_SIZE"], std::to_string(n));
    EXPECT_EQ(v["LOCAL_WORLD_SIZE"], std::to_string(n));
    EXPECT_EQ(v["GROUP_RANK"], "0");
    EXPECT_EQ(v["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(v["ROLE_RANK"], std::to_string(r));
    EXPECT_EQ(v["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(v["MASTER_PORT"], port[1].str());
    EXPECT_EQ(v["NANODDP_RESTART_COUNT"], "0");
    EXPECT_EQ(v["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(v["NANODDP_AGENT_STORE"], "1");
    EXPECT_EQ(v["OMP_NUM_THREADS"], std::to_string(omp));
  }
  // Every rank reached the launcher's store and saw all the others there.
  auto stores = lines_by_rank(p.out(), "store ok");
  ASSERT_EQ(int(stores.size()), n) << p.all();
  for (auto& [rank, lines] : stores) EXPECT_EQ(lines.front(), "world " + std::to_string(n));
  // The OMP_NUM_THREADS note is printed once.
  size_t first = err.find("setting OMP_NUM_THREADS=");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("setting OMP_NUM_THREADS=", first + 1), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Workers, LauncherEnv, ::testing::Values(2, 3));

TEST(Launcher, UserOmpNumThreadsIsKept) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2"}, {"--env"}), {"OMP_NUM_THREADS=7"});
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  for (auto& [rank, v] : env_by_rank(p.out())) EXPECT_EQ(v["OMP_NUM_THREADS"], "7");
  EXPECT_EQ(p.err().find("setting OMP_NUM_THREADS"), std::string::npos);
}

TEST(Launcher, OutputLinesArePrefixedAndWhole) {
  const int kLines = 300, kErrLines = 100;
  Proc p(launch({"--standalone", "--nproc_per_node", "2"},
                {"--lines", std::to_string(kLines), "--err_lines", std::to_string(kErrLines), "--partial"}));
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  // stdout holds exactly each rank's lines, in its order, whole and prefixed; stderr likewise.
  auto check_stream = [](const std::string& text, const std::string& word, int count) {
    std::map<int, int> next;
    std::regex re("^\\[rank (\\d)\\]: " + word + " (\\d+) of rank (\\d)$");
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("nanoddp run: ") || line.find("no newline at the end") != std::string::npos) continue;
      std::smatch m;
      ASSERT_TRUE(std::regex_match(line, m, re)) << "mangled line: '" << line << "'";
      EXPECT_EQ(m[1], m[3]) << line;
      int rank = std::stoi(m[1]);
      EXPECT_EQ(std::stoi(m[2]), next[rank]) << line;
      next[rank]++;
    }
    EXPECT_EQ(next[0], count);
    EXPECT_EQ(next[1], count);
  };
  check_stream(p.out(), "line", kLines);
  check_stream(p.err(), "errline", kErrLines);
  // A last line without '\n' still arrives, whole, once the worker exits.
  for (int r = 0; r < 2; r++)
    EXPECT_NE(p.out().find("[rank " + std::to_string(r) + "]: no newline at the end from rank " + std::to_string(r) +
                           "\n"),
              std::string::npos)
        << p.out();
}

TEST(Launcher, LogDirWithRedirectsAndTee) {
  ScratchDir dir("launcher_logs");
  // stdout only to the files, stderr to both.
  Proc p(launch({"--standalone", "--nproc_per_node", "2", "--log_dir", dir.str(), "--redirects", "1", "--tee", "2"},
                {"--lines", "3", "--err_lines", "2"}));
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  EXPECT_EQ(p.out().find("line 0 of rank"), std::string::npos) << "redirected stdout reached the console";
  EXPECT_NE(p.err().find("[rank 1]: errline 1 of rank 1"), std::string::npos) << p.err();
  for (int r = 0; r < 2; r++) {
    std::string log = read_file(dir.str("attempt_0/rank_" + std::to_string(r) + ".log"));
    for (int i = 0; i < 3; i++)
      EXPECT_NE(log.find(fmt::format("line {} of rank {}\n", i, r)), std::string::npos) << log;
    for (int i = 0; i < 2; i++)
      EXPECT_NE(log.find(fmt::format("errline {} of rank {}\n", i, r)), std::string::npos) << log;
    EXPECT_EQ(log.find("[rank"), std::string::npos) << "log files are not prefixed";
  }
}

TEST(Launcher, NanoddpSubcommandRunsThisExecutable) {
  Proc p({testing::nanoddp_binary(), "run", "--standalone", "--nproc-per-node", "2", "info"});
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  EXPECT_NE(p.out().find("[rank 0]: nanoddp "), std::string::npos) << p.all();
  EXPECT_NE(p.out().find("[rank 1]: nanoddp "), std::string::npos) << p.all();
}

TEST(Launcher, UnknownProgramIsAClearError) {
  Proc p({testing::nanoddp_binary(), "run", "--standalone", "no_such_program_xyz"});
  EXPECT_EQ(p.wait_exit(), 1);
  EXPECT_NE(p.err().find("'no_such_program_xyz' is neither a nanoddp subcommand"), std::string::npos) << p.all();
}

TEST(Launcher, WorkerExitCodeStopsTheOthersAndNamesTheRank) {
  auto start = Clock::now();
  Proc p(launch({"--standalone", "--nproc_per_node", "3"},
                {"--pid", "--store", "--lines", "2", "--exit_rank", "1", "--exit_code", "3", "--sleep", "60"}));
  auto pids = wait_for_pids(p, 3);
  ASSERT_EQ(p.wait_exit(20s), 1) << p.all();
  EXPECT_LT(Clock::now() - start, 10s);
  std::string err = p.err();
  EXPECT_NE(err.find("nanoddp run: rank 1 (local 1 on "), std::string::npos) << err;
  EXPECT_NE(err.find(fmt::format(", pid {}) exited with code 3", pids[1])), std::string::npos) << err;
  // The report ends with the failed rank's last lines, and it is printed once.
  EXPECT_NE(err.find("  [rank 1]: about to exit with code 3"), std::string::npos) << err;
  EXPECT_EQ(err.find("exited with code 3"), err.rfind("exited with code 3")) << err;
  EXPECT_NE(err.find("job failed after 1 attempt(s)"), std::string::npos) << err;
  expect_all_gone(pids, "worker");
}

TEST(Launcher, KillNineOfOneRankEndsTheJobWithinTenSeconds) {
  Proc p(launch({"--standalone", "--nproc_per_node", "3"}, {"--pid", "--spawn_child", "--sleep", "60"}));
  auto pids = wait_for_pids(p, 3);
  auto children = wait_for_pids(p, 3, "child pid");
  auto start = Clock::now();
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  ASSERT_EQ(p.wait_exit(10s), 1) << p.all();
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_NE(p.err().find("rank 1 (local 1 on "), std::string::npos) << p.err();
  EXPECT_NE(p.err().find(fmt::format("pid {}) was killed by SIGKILL", pids[1])), std::string::npos) << p.err();
  expect_all_gone(pids, "worker");
  expect_all_gone(children, "worker's child");
}

TEST(Launcher, DeathBySignalIsNamed) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2"}, {"--signal_rank", "0", "--signal", "6", "--sleep", "60"}));
  ASSERT_EQ(p.wait_exit(20s), 1) << p.all();
  EXPECT_NE(p.err().find("rank 0 (local 0 on "), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("was killed by SIGABRT"), std::string::npos) << p.err();
}

TEST(Launcher, MaxRestartsRestartsTheGroupUntilItSucceeds) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2", "--max_restarts", "1", "--monitor_interval", "0.1"},
                {"--env", "--fail_rank", "1", "--fail_until_restart", "1", "--store"}));
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  std::string all = p.all();
  EXPECT_NE(all.find("rank 1 (local 1 on "), std::string::npos) << all;
  EXPECT_NE(all.find("restarting every worker (restart 1 of --max_restarts 1)"), std::string::npos) << all;
  // Both attempts ran every rank; the last env line of each rank is attempt 1's.
  auto envs = lines_by_rank(p.out(), "env");
  ASSERT_EQ(envs.size(), 2u);
  for (auto& [rank, lines] : envs) {
    ASSERT_EQ(lines.size(), 2u) << all;
    EXPECT_NE(lines[0].find("NANODDP_RESTART_COUNT=0 TORCHELASTIC_RESTART_COUNT=0"), std::string::npos);
    EXPECT_NE(lines[1].find("NANODDP_RESTART_COUNT=1 TORCHELASTIC_RESTART_COUNT=1"), std::string::npos);
  }
  EXPECT_EQ(lines_by_rank(p.out(), "store ok").size(), 2u) << all;  // attempt 1's workers met in the store
}

TEST(Launcher, RestartsRunOut) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2", "--max_restarts", "1"},
                {"--fail_rank", "0", "--fail_until_restart", "5", "--sleep", "60"}));
  ASSERT_EQ(p.wait_exit(), 1) << p.all();
  EXPECT_NE(p.err().find("job failed after 2 attempt(s) (--max_restarts 1)"), std::string::npos) << p.err();
  EXPECT_NE(p.out().find("[rank 0]: failing on restart 1"), std::string::npos) << p.out();
}

TEST(Launcher, SigintStopsEveryWorkerAndTheirChildren) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2"}, {"--pid", "--spawn_child", "--sleep", "60"}));
  auto pids = wait_for_pids(p, 2);
  auto children = wait_for_pids(p, 2, "child pid");
  ::kill(p.pid(), SIGINT);
  ASSERT_EQ(p.wait_exit(10s), 130) << p.all();
  EXPECT_NE(p.err().find("received SIGINT; stopping 2 worker(s)"), std::string::npos) << p.err();
  expect_all_gone(pids, "worker");
  expect_all_gone(children, "worker's child");
}

TEST(Launcher, SigtermEscalatesToSigkillForWorkersThatIgnoreIt) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2", "--stop_timeout", "0.5"},
                {"--pid", "--ignore_term", "--sleep", "60"}));
  auto pids = wait_for_pids(p, 2);
  ::kill(p.pid(), SIGTERM);
  ASSERT_EQ(p.wait_exit(10s), 143) << p.all();
  EXPECT_NE(p.err().find("2 worker(s) still running 0.5 s after SIGTERM; sending SIGKILL"), std::string::npos)
      << p.err();
  expect_all_gone(pids, "worker");
}

TEST(Launcher, WorkersDieWithALauncherKilledByKillNine) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2"}, {"--pid", "--sleep", "60"}));
  auto pids = wait_for_pids(p, 2);
  ::kill(p.pid(), SIGKILL);
  ASSERT_EQ(p.wait_exit(10s), 128 + SIGKILL);
  expect_all_gone(pids, "worker");  // PR_SET_PDEATHSIG
}

// ---------------------------------------------------------------------------------------------
// With the real training command: a rank that dies mid-run costs a restart, not the run.

// `[rank 0]: <prefix>...` lines of the output, in order.
std::vector<std::string> rank0_lines(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("[rank 0]: " + prefix)) out.push_back(line);
  return out;
}

TEST(LauncherTraining, ARestartResumesFromTheNewestCheckpointAndEndsLikeAStraightRun) {
  ScratchDir dir("launcher_train");
  {
    // 200 documents of 60 words from a fixed generator: enough for 12 tiny steps.
    std::ofstream corpus(dir.str("corpus.jsonl"));
    const char* words[] = {"the", "cat", "dog", "sat", "ran", "on", "a", "mat", "big", "small", "red", "and"};
    Rng rng(7);
    for (int d = 0; d < 200; d++) {
      std::string text;
      for (int w = 0; w < 60; w++) text += std::string(w ? " " : "") + words[rng.next_u64() % 12];
      corpus << "{\"text\": \"" << text << ".\"}\n";
    }
  }
  std::string nanoddp = testing::nanoddp_binary();
  auto prep = testing::run_command(nanoddp + " data prepare --input " + dir.str("corpus.jsonl") + " --out " +
                                   dir.str("data"));
  ASSERT_EQ(prep.status, 0) << prep.output;
  std::vector<std::string> train = {"--depth", "2", "--aspect_ratio", "32", "--head_dim", "32", "--max_seq_len", "32",
                                    "--device_batch_size", "4", "--total_batch_size", "256", "--num_iterations", "12",
                                    "--eval_every", "6", "--eval_tokens", "512", "--save_every", "3", "--data",
                                    dir.str("data"), "--threads", "1", "--peak_flops", "1e9"};
  auto with = [&](std::vector<std::string> head, const std::string& out) {
    head.insert(head.end(), train.begin(), train.end());
    head.insert(head.end(), {"--out", out});
    return head;
  };

  Proc straight(with({nanoddp, "run", "--standalone", "--nproc_per_node", "2", "train"}, dir.str("straight")));
  ASSERT_EQ(straight.wait_exit(120s), 0) << straight.all();

  // Attempt 0: both ranks train up to the checkpoint of step 6 (--stop_at); then rank 1 fails while
  // rank 0 stays alive (sleeping, as if still busy) until the launcher stops it. Attempt 1 resumes
  // both from step 6: a launcher restart implies --resume auto.
  const char* script =
      "if [ \"$NANODDP_RESTART_COUNT\" = 0 ]; then \"$0\" train \"$@\" --stop_at 6 || exit 2; "
      "if [ \"$RANK\" = 1 ]; then exit 1; fi; exec sleep 60; fi; exec \"$0\" train \"$@\"";
  Proc restarted(with({nanoddp, "run", "--standalone", "--nproc_per_node", "2", "--max_restarts", "1",
                       "--monitor_interval", "0.1", "/bin/sh", "-c", script, nanoddp},
                      dir.str("restarted")));
  ASSERT_EQ(restarted.wait_exit(120s), 0) << restarted.all();
  std::string all = restarted.all();
  EXPECT_NE(all.find("restarting every worker (restart 1 of --max_restarts 1)"), std::string::npos) << all;
  EXPECT_NE(all.find("rank 1 (local 1 on "), std::string::npos) << all;
  EXPECT_NE(all.find("resumed from " + dir.str("restarted") + "/checkpoints/step_000006 (step 6)"), std::string::npos)
      << all;
  // Steps 1-6 ran once, in attempt 0; attempt 1 went on from step 7 instead of starting over.
  EXPECT_EQ(rank0_lines(restarted.out(), "step 00001/00012").size(), 1u) << all;
  EXPECT_EQ(rank0_lines(restarted.out(), "step 00006/00012").size(), 1u) << all;
  EXPECT_EQ(rank0_lines(restarted.out(), "step 00007/00012").size(), 1u) << all;
  // The resumed run ends where the straight one does, to the printed digit: the last training loss
  // and the final validation loss and bits per byte.
  auto final_numbers = [](Proc& p) {
    auto train_lines = rank0_lines(p.out(), "step 00012/00012 | loss "),
         val_lines = rank0_lines(p.out(), "step 00012 | val loss ");
    EXPECT_EQ(train_lines.size(), 1u) << p.all();
    EXPECT_EQ(val_lines.size(), 1u) << p.all();
    std::string train_line = train_lines.empty() ? "" : train_lines[0], val_line = val_lines.empty() ? "" : val_lines[0];
    std::smatch loss, val;
    std::regex_search(train_line, loss, std::regex("loss ([0-9.]+)"));
    std::regex_search(val_line, val, std::regex("val loss ([0-9.]+) \\| val bpb ([0-9.]+)"));
    return std::vector<std::string>{loss.size() > 1 ? loss[1].str() : "?", val.size() > 2 ? val[1].str() : "?",
                                    val.size() > 2 ? val[2].str() : "?"};
  };
  EXPECT_EQ(final_numbers(restarted), final_numbers(straight));
}

// ---------------------------------------------------------------------------------------------
// Bad input.

TEST(Launcher, PortInUseOnNodeZero) {
  int port = 0;
  net::Fd taken = net::listen_tcp("", 0, &port);
  Proc p(launch({"--master_port", std::to_string(port)}, {}));
  ASSERT_EQ(p.wait_exit(), 1) << p.all();
  EXPECT_NE(p.err().find(fmt::format("port {} on this host is already in use", port)), std::string::npos) << p.err();
}

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
// Several nodes.

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
