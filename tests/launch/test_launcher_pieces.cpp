// The launcher's pieces on their own, without processes: flag resolution, the launch plan, the
// workers' environment, and how worker output is routed and reassembled into lines. The launcher
// end to end is in test_launcher_run.cpp, several nodes in test_launcher_multinode.cpp.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <netdb.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <thread>

#include "core/device.h"
#include "core/error.h"
#include "launch/launcher.h"
#include "launch/launcher_output.h"
#include "launch/launcher_plan.h"
#include "launch/launcher_rendezvous.h"
#include "launch/launcher_stop.h"
#include "launch/launcher_workers.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

using testing::read_file;
using testing::ScratchDir;

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
  auto plan_with = [](auto edit) {
    LaunchOptions o;
    edit(o);
    make_launch_plan(o);
  };
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.nnodes = "2"; o.node_rank = 2; }),
                       "--node_rank 2 is out of range");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.nnodes = "2"; o.standalone = true; }), "--standalone");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.master_port = 70000; }), "--master_port");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.redirects = "4"; }), "--redirects");
  // torchrun's flags: what means something here is applied, the rest refused with what to use.
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.rdzv_backend = "etcd"; }), "use --rdzv_backend c10d");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.rdzv_conf = "bogus=1"; }), "unknown key 'bogus'");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.rdzv_conf = "join_timeout=soon"; }), "join_timeout=soon");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.rdzv_id = "a/b"; }), "--rdzv_id");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.start_method = "thread"; }), "--start_method thread");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.local_ranks_filter = "0,1"; }),
                       "'1' is not a local rank of this node (0..0)");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.monitor_interval = 0; }), "--monitor_interval");
  // Was: 0.0004 s became 0 ms (a busy loop) and 1e10 s overflowed the deadline into the past.
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.monitor_interval = 0.0004; }), "--monitor_interval",
                       "from 0.001");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.rdzv_timeout = 1e10; }), "--rdzv_timeout", "604800");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.stop_timeout = "nan"; }), "--stop_timeout");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.stop_timeout = "soon"; }), "--stop_timeout 'soon' is not "
                       "auto or a number");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.stop_timeout = "5s"; }), "--stop_timeout '5s'");
  NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.rdzv_conf = "timeout=1e300"; }), "timeout=1e300");
  EXPECT_NO_THROW(plan_with([](LaunchOptions& o) { o.stop_timeout = "0"; }));
  // Was: --nproc_per_node 100000 forked for minutes, deaf to SIGTERM.
  EXPECT_THROW(resolve_nproc_per_node("100000"), Error);
  // Was: node 0 waited the whole 300 s rendezvous timeout in silence. (.invalid never resolves;
  // without a reachable DNS server the answer is "try again", which the launcher lets through.)
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo("node0.invalid", nullptr, nullptr, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc != EAI_AGAIN)
    NANODDP_EXPECT_ERROR(plan_with([](LaunchOptions& o) { o.master_addr = "node0.invalid"; }),
                         "--master_addr node0.invalid does not resolve");
  LaunchOptions o;
  o.rdzv_endpoint = "10.1.2.3:1234";
  o.rdzv_backend = "c10d";
  o.rdzv_conf = "read_timeout=60,join_timeout=42.5";
  o.start_method = "fork";
  LaunchPlan p = make_launch_plan(o);
  EXPECT_EQ(p.master_addr, "10.1.2.3");
  EXPECT_EQ(p.master_port, 1234);
  EXPECT_EQ(p.rdzv_timeout, std::chrono::milliseconds(42500)) << "join_timeout is the rendezvous timeout";
}

// Note [a stop that saves]: a given --stop_timeout is used as given; "auto" is 5 s after a failure,
// and after a signal 30 s plus twice the longest save the workers reported.
TEST(LauncherPieces, StopGraceComesFromTheFlagOrTheLastSave) {
  using std::chrono::milliseconds;
  LaunchOptions o;
  EXPECT_EQ(make_launch_plan(o).stop_timeout, std::nullopt) << "auto by default";
  o.stop_timeout = "2.5";
  EXPECT_EQ(make_launch_plan(o).stop_timeout, milliseconds(2500));
  EXPECT_EQ(stop_grace(milliseconds(2500), true, 100.0).grace, milliseconds(2500)) << "a given value is kept";
  EXPECT_EQ(stop_grace(milliseconds(2500), false, std::nullopt).grace, milliseconds(2500));
  EXPECT_EQ(stop_grace(std::nullopt, false, 100.0).grace, milliseconds(5000)) << "a failed group cannot save";
  EXPECT_EQ(stop_grace(std::nullopt, true, std::nullopt).grace, milliseconds(30000));
  const StopGrace sized = stop_grace(std::nullopt, true, 4.0);
  EXPECT_EQ(sized.grace, milliseconds(38000));
  EXPECT_NE(sized.why.find("twice the last save's 4.0 s"), std::string::npos) << sized.why;
  EXPECT_EQ(stop_grace(std::nullopt, true, 1e300).grace, milliseconds(int64_t(7) * 24 * 3600 * 1000))
      << "a week at most";

  // The files: the longest report wins; what is not a number of seconds >= 0 is no report.
  std::string dir;
  {
    SaveTimes saves;
    ASSERT_FALSE(saves.path(0).empty());
    dir = std::filesystem::path(saves.path(0)).parent_path().string();
    EXPECT_EQ(saves.longest(3), std::nullopt);
    std::ofstream(saves.path(1)) << "12.5\n";
    EXPECT_EQ(saves.longest(3), 12.5);
    std::ofstream(saves.path(0)) << "3\n";
    std::ofstream(saves.path(2)) << "nan\n";
    EXPECT_EQ(saves.longest(3), 12.5);
    EXPECT_EQ(saves.longest(1), 3.0) << "only this node's local ranks count";
    std::ofstream(saves.path(1)) << "-4\n";
    EXPECT_EQ(saves.longest(3), 3.0);
    std::ofstream(saves.path(0)) << "";  // a file read while a worker rewrites it
    EXPECT_EQ(saves.longest(3), std::nullopt);
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << "the folder goes with the launcher";
}

// Where node 0's store listens. Was: every interface for several nodes, even with a loopback
// --master_addr that no other host can use.
TEST(LauncherPieces, TheStoreListensOnLoopbackForALoopbackMasterAddrOrWhereTold) {
  auto plan = [](const char* nnodes, const char* addr, const char* bind) {
    LaunchOptions o;
    o.nnodes = nnodes;
    o.master_addr = addr;
    o.master_bind = bind;
    return make_launch_plan(o);
  };
  for (const char* nnodes : {"1", "2"}) {
    EXPECT_EQ(plan(nnodes, "127.0.0.1", "").store_host, "localhost") << nnodes;
    EXPECT_EQ(plan(nnodes, "localhost", "").store_host, "localhost") << nnodes;
    EXPECT_EQ(plan(nnodes, "127.0.0.2", "").store_host, "127.0.0.2")
        << "that address, which a socket on 127.0.0.1 would not answer";
    EXPECT_FALSE(plan(nnodes, "127.0.0.1", "").store_on_every_interface());
    EXPECT_EQ(plan(nnodes, "127.0.0.1", "0.0.0.0").store_host, "0.0.0.0") << "--master_bind wins";
    EXPECT_TRUE(plan(nnodes, "127.0.0.1", "::").store_on_every_interface());
  }
  EXPECT_EQ(plan("1", "10.1.2.3", "").store_host, "10.1.2.3");
  EXPECT_TRUE(plan("2", "10.1.2.3", "").store_on_every_interface());
  EXPECT_EQ(plan("2", "10.1.2.3", "10.1.2.3").store_host, "10.1.2.3");
}

// Variables a PyTorch or nanochat user sets out of habit get one line each, saying what they do here.
TEST(LauncherPieces, KnownEnvironmentVariablesGetANotice) {
  auto notes = environment_notices(
      {"PATH=/usr/bin", "WANDB_RUN=d20", "NCCL_DEBUG=INFO", "TORCH_DISTRIBUTED_DEBUG=DETAIL", "NCCL_DEBUG_SUBSYS=ALL"});
  ASSERT_EQ(notes.size(), 3u) << fmt::format("{}", fmt::join(notes, "\n"));
  EXPECT_NE(notes[0].find("NCCL_DEBUG=INFO is set: NCCL reads it itself"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("TORCH_DISTRIBUTED_DEBUG=DETAIL is set"), std::string::npos) << notes[1];
  EXPECT_NE(notes[2].find("WANDB_RUN=d20 is set"), std::string::npos) << notes[2];
  EXPECT_NE(notes[2].find("metrics.jsonl"), std::string::npos) << notes[2];
  EXPECT_TRUE(environment_notices({"PATH=/usr/bin", "NCCL_DEBUGX=1"}).empty());
}

// Launchers on one host each size their workers' threads from every core; together they may run
// more threads than the host has cores. Was: silent, a 2x slowdown.
TEST(LauncherPieces, LaunchersThatShareAHostsCoresAreWarned) {
  auto node = [](const char* host, int nproc, int threads) {
    NodeRecord n{2, nproc, host, 1};
    n.threads = threads;
    n.host_cores = 8;
    return n;
  };
  auto warning = [](std::vector<NodeRecord> nodes, int node) {
    Membership m;
    m.nodes = std::move(nodes);
    return m.oversubscription_warning(node);
  };
  const std::string w = warning({node("a", 2, 4), node("a", 2, 4)}, 1);
  EXPECT_NE(w.find("the launchers on a (node(s) 0, 1) run 4 worker(s) with 16 threads in all on 8 cores"),
            std::string::npos) << w;
  EXPECT_NE(w.find("set OMP_NUM_THREADS=2 for every launcher"), std::string::npos) << w;
  EXPECT_EQ(warning({node("a", 2, 4), node("b", 2, 4)}, 0), "") << "other hosts";
  EXPECT_EQ(warning({node("a", 2, 2), node("a", 2, 2)}, 0), "") << "fits";
  EXPECT_EQ(warning({node("a", 12, 1)}, 0), "") << "one thread each cannot be less";
  EXPECT_NE(warning({node("a", 2, 8)}, 0).find("the launcher on a (node(s) 0) runs"), std::string::npos)
      << "one launcher with the user's OMP_NUM_THREADS";
  EXPECT_EQ(warning({node("a", 2, 4), node("a", 2, 0)}, 0), "") << "not recorded";
}

TEST(LauncherPieces, PerRankStreamMapsAndConsoleFilter) {
  EXPECT_EQ(parse_stream_map("3", "tee", 3), (std::vector<int>{3, 3, 3}));
  EXPECT_EQ(parse_stream_map("0:3,2:1", "tee", 3), (std::vector<int>{3, 0, 1})) << "unlisted ranks: 0";
  for (const char* bad : {"4", "x", "0:4", "0=3", "3:1", "-1:1", ""})
    NANODDP_EXPECT_ERROR(parse_stream_map(bad, "redirects", 3), "--redirects");
  LaunchOptions o;
  o.nproc_per_node = "3";
  o.redirects = "0:3";         // rank 0: files only
  o.tee = "1:2";               // rank 1: stderr to both
  o.local_ranks_filter = "0,1";  // rank 2 off the console
  const LaunchPlan p = make_launch_plan(o);
  ASSERT_EQ(p.routing.size(), 3u);
  EXPECT_FALSE(p.log_dir.empty()) << "files without --log_dir go to a temporary folder";
  EXPECT_FALSE(p.routing[0].console[0] || p.routing[0].console[1]);
  EXPECT_TRUE(p.routing[0].file[0] && p.routing[0].file[1]);
  EXPECT_TRUE(p.routing[1].console[0] && p.routing[1].console[1]);
  EXPECT_TRUE(!p.routing[1].file[0] && p.routing[1].file[1]);
  EXPECT_FALSE(p.routing[2].console[0] || p.routing[2].console[1]) << "filtered out";
  EXPECT_FALSE(p.routing[2].any_file()) << "0 for rank 2: no file either";
  std::filesystem::remove_all(p.log_dir);
}

TEST(LauncherPieces, EnvironmentMergeReplacesAndKeeps) {
  LaunchPlan plan;
  plan.node_rank = 1;
  plan.nnodes = 2;
  plan.omp_threads = 4;
  WorkerIdentity id{5, 1, 8, 4, 2, "10.0.0.1", 1234, 29500};
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
  EXPECT_EQ(m["NANODDP_AGENT_STORE_PORT"], "29500");
  EXPECT_EQ(m["OMP_NUM_THREADS"], "4");
  EXPECT_EQ(m["ROLE_NAME"], "default");
  EXPECT_EQ(m["TORCHELASTIC_RUN_ID"], "none");
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

// A console inherited non-blocking says EAGAIN when full: every byte still arrives, in order.
// Was: the rest of the batch was dropped, maybe mid-line.
TEST(LauncherPieces, WritesToAFullNonBlockingConsoleWaitForRoom) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) | O_NONBLOCK), 0);
  std::string text;
  for (int i = 0; text.size() < (1 << 20); i++) text += "[rank 0]: line " + std::to_string(i) + "\n";
  std::string got;
  std::thread reader([&] {  // slower than the writer: the 64 KiB pipe fills again and again
    char buf[4096];
    for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) > 0;) {
      got.append(buf, size_t(k));
      if (got.size() % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  write_fully(fds[1], text);
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  EXPECT_EQ(got.size(), text.size());
  EXPECT_TRUE(got == text);
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

// A worker's process group is signalled while something is in it, also after the worker itself
// exited (what it left behind), and never again once its last member is reaped: the number may
// then come back as another program's group. Was: every stop signalled every worker's number.
TEST(LauncherPieces, AWorkersGroupIsForgottenOnceItsLastMemberIsReaped) {
  using namespace std::chrono_literals;
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // as run_launcher: leftovers come back to us
  WorkerSpec spec;
  spec.env = {"PATH=/usr/bin:/bin"};
  // The worker exits at once and leaves a child in its group for 2 s.
  WorkerGroup group({"/bin/sh", {"sh", "-c", "sleep 2 & exit 0"}}, {spec});
  group.start();
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (group.any_running() && std::chrono::steady_clock::now() < deadline) group.pump(50ms);
  ASSERT_FALSE(group.any_running());
  EXPECT_TRUE(group.group_alive(0)) << "the group still holds the worker's child";
  while (group.group_alive(0) && std::chrono::steady_clock::now() < deadline) group.pump(50ms);
  EXPECT_FALSE(group.group_alive(0)) << "the child was reaped 2 s in; its group is empty";
  EXPECT_TRUE(group.all_succeeded());
}

}  // namespace
}  // namespace nanoddp::dist
