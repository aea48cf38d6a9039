// The launcher, `nanoddp run`, end to end on one node, tested as users meet it: the real binary
// starts real worker processes (launch_worker.cpp), and the tests read its output, signal it and its
// workers, and look at which processes are left: the workers' environment, output prefixing and
// log files, failures named by rank, restarts (also of a real training run), signals.
//
// Every wait is on a condition (a line of output, a process exit) with a timeout; nothing sleeps a
// fixed time hoping that something happened meanwhile.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "launch/launcher_plan.h"
#include "launcher_test_util.h"
#include "rendezvous/net.h"
#include "subprocess.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::env_by_rank;
using testing::expect_all_gone;
using testing::launch;
using testing::lines_by_rank;
using testing::Proc;
using testing::read_file;
using testing::ScratchDir;
using testing::wait_for_pids;

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
    // MASTER_PORT is a free port for the workers' own use, the same on every rank; the store is
    // elsewhere (Note [two ports]).
    EXPECT_EQ(v["MASTER_PORT"], env[0]["MASTER_PORT"]);
    EXPECT_NE(v["MASTER_PORT"], port[1].str());
    EXPECT_GT(std::stoi(v["MASTER_PORT"]), 0);
    EXPECT_EQ(v["NANODDP_AGENT_STORE_PORT"], port[1].str());
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

// The one folder of LOG_DIR whose name starts with `prefix` (Note [a log folder per launch]).
std::vector<std::string> run_folders(const ScratchDir& dir, const std::string& prefix) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0) found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  return found;
}

TEST(Launcher, LogDirWithRedirectsAndTee) {
  ScratchDir dir("launcher_logs");
  // stdout only to the files, stderr to both; torchrun's short names (-r, -t), the long ones below.
  Proc p(launch({"--standalone", "--nproc_per_node", "2", "--log_dir", dir.str(), "-r", "1", "-t", "2",
                 "--rdzv_id", "job1"},
                {"--lines", "3", "--err_lines", "2"}));
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  EXPECT_EQ(p.out().find("line 0 of rank"), std::string::npos) << "redirected stdout reached the console";
  EXPECT_NE(p.err().find("[rank 1]: errline 1 of rank 1"), std::string::npos) << p.err();
  const auto runs = run_folders(dir, "job1_");
  ASSERT_EQ(runs.size(), 1u);
  for (int r = 0; r < 2; r++) {
    std::string log = read_file(runs[0] + "/attempt_0/rank_" + std::to_string(r) + ".log");
    for (int i = 0; i < 3; i++)
      EXPECT_NE(log.find(fmt::format("line {} of rank {}\n", i, r)), std::string::npos) << log;
    for (int i = 0; i < 2; i++)
      EXPECT_NE(log.find(fmt::format("errline {} of rank {}\n", i, r)), std::string::npos) << log;
    EXPECT_EQ(log.find("[rank"), std::string::npos) << "log files are not prefixed";
  }
}

// A folder reused by a smaller run: the new run gets a folder of its own, so none of its files is a
// stale one from the earlier, larger run, and the earlier run's files are all still there.
TEST(Launcher, AReusedLogDirKeepsRunsApartAndPerRankMapsRoute) {
  ScratchDir dir("launcher_log_reuse");
  Proc big(launch({"--standalone", "--nproc_per_node", "3", "--log_dir", dir.str()}, {"--lines", "1"}));
  ASSERT_EQ(big.wait_exit(), 0) << big.all();
  // rank 0: both streams to the file only; rank 1: 0, which with --log_dir means the console and
  // the file (--log_dir alone tees); --local_ranks_filter 0 then keeps rank 1 off the console.
  Proc small(launch({"--standalone", "--nproc_per_node", "2", "--log_dir", dir.str(), "--redirects", "0:3",
                     "--tee", "1:0", "--local_ranks_filter", "0"},
                    {"--lines", "2"}));
  ASSERT_EQ(small.wait_exit(), 0) << small.all();
  EXPECT_EQ(small.out().find("[rank 0]"), std::string::npos) << "rank 0 was redirected to its file";
  EXPECT_EQ(small.out().find("[rank 1]"), std::string::npos) << "rank 1 was filtered off the console";
  const auto runs = run_folders(dir, "none_");
  ASSERT_EQ(runs.size(), 2u) << "one folder per launch";
  int with_three = 0;
  for (const auto& run : runs) {
    const bool big_run = std::filesystem::exists(run + "/attempt_0/rank_2.log");
    with_three += big_run;
    if (!big_run) {
      EXPECT_NE(read_file(run + "/attempt_0/rank_0.log").find("line 1 of rank 0"), std::string::npos);
      EXPECT_NE(read_file(run + "/attempt_0/rank_1.log").find("line 1 of rank 1"), std::string::npos);
      EXPECT_FALSE(std::filesystem::exists(run + "/attempt_0/rank_2.log"));
    } else {
      for (int r = 0; r < 3; r++)
        EXPECT_NE(read_file(fmt::format("{}/attempt_0/rank_{}.log", run, r)).find(fmt::format("line 0 of rank {}", r)),
                  std::string::npos) << "the earlier run's logs are kept";
    }
  }
  EXPECT_EQ(with_three, 1);
}

// torchrun's habit: the command is a Python script (or -m module), run with python3, and the
// workers see ROLE_NAME and TORCHELASTIC_RUN_ID.
TEST(Launcher, PythonScriptsAndModulesRunUnderPython3) {
  NANODDP_SKIP_UNLESS(!find_program("python3").empty(), "python3 is not on PATH");
  ScratchDir dir("launcher_python");
  std::ofstream(dir.str("show.py")) << "import os\nprint('py', os.environ['RANK'], os.environ['ROLE_NAME'], "
                                       "os.environ['TORCHELASTIC_RUN_ID'])\n";
  std::filesystem::create_directories(dir.path() / "pkg");
  std::ofstream(dir.str("pkg/mod.py")) << "import os\nprint('mod', os.environ['RANK'])\n";
  const std::string cd = "cd " + dir.str() + " && " + testing::nanoddp_binary();
  auto script = testing::run_command(cd + " run --standalone --nproc_per_node 2 --role trainer --rdzv_id j7 show.py");
  ASSERT_EQ(script.status, 0) << script.output;
  for (int r = 0; r < 2; r++)
    EXPECT_NE(script.output.find(fmt::format("[rank {}]: py {} trainer j7", r, r)), std::string::npos) << script.output;
  auto module = testing::run_command(cd + " run --standalone --nproc_per_node 2 -m pkg.mod");
  ASSERT_EQ(module.status, 0) << module.output;
  EXPECT_NE(module.output.find("[rank 1]: mod 1"), std::string::npos) << module.output;
  // --no_python: the file itself is the program, and it is not executable: one line saying how.
  auto no_python = testing::run_command(cd + " run --standalone --no_python show.py");
  EXPECT_EQ(no_python.status, 1) << no_python.output;
  EXPECT_NE(no_python.output.find("python3 show.py"), std::string::npos) << no_python.output;
  auto missing = testing::run_command(cd + " run --standalone missing.py");
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("the script missing.py does not exist"), std::string::npos) << missing.output;
  // Python's output is unbuffered (PYTHONUNBUFFERED=1 unless set): the last print before a SIGKILL
  // reaches the console and the failure report. Was: lost in Python's 8 KiB pipe buffer.
  std::ofstream(dir.str("crash.py")) << "import os, signal\nprint('the last words', flush=False)\n"
                                        "os.kill(os.getpid(), signal.SIGKILL)\n";
  auto crash = testing::run_command("cd " + dir.str() + " && env -u PYTHONUNBUFFERED " + testing::nanoddp_binary() +
                                    " run --standalone crash.py");
  EXPECT_EQ(crash.status, 1) << crash.output;
  EXPECT_NE(crash.output.find("[rank 0]: the last words"), std::string::npos) << crash.output;
  EXPECT_NE(crash.output.find("was killed by SIGKILL"), std::string::npos) << crash.output;
}

// A PyTorch script written for torchrun runs unchanged: init_process_group(init_method="env://")
// makes rank 0 bind MASTER_PORT for PyTorch's own TCPStore, so that port must be free (it was the
// launcher's store before Note [two ports]), and a restart gets a port again.
TEST(Launcher, PyTorchScriptsInitialiseTheirProcessGroupFromTheEnvironment) {
  // Debian's python3 with python3-torch (scripts/setup.sh), first on PATH for the launcher.
  const std::string path = "PATH=/usr/bin:$PATH ";
  auto torch = testing::run_command(path + "python3 -c 'import torch.distributed' 2>&1");
  NANODDP_SKIP_UNLESS_REFERENCE(torch.status == 0, "python3-torch is not installed (scripts/setup.sh installs it): " +
                                                       torch.output);
  ScratchDir dir("launcher_torch");
  // Each rank contributes rank + 1; the sum over 3 ranks is 6. Attempt 0's rank 2 then fails, so
  // that attempt 1 proves a restarted job initialises again.
  std::ofstream(dir.str("ddp.py"))
      << "import os, sys, datetime\nimport torch, torch.distributed as dist\n"
         "dist.init_process_group('gloo', init_method='env://', timeout=datetime.timedelta(seconds=60))\n"
         "t = torch.tensor([float(dist.get_rank() + 1)])\ndist.all_reduce(t)\n"
         "restart = os.environ['TORCHELASTIC_RESTART_COUNT']\n"
         "print('sum', int(t.item()), 'rank', dist.get_rank(), 'of', dist.get_world_size(), 'restart', restart,\n"
         "      flush=True)\n"
         "dist.barrier()\ndist.destroy_process_group()\n"
         "sys.exit(3 if restart == '0' and os.environ['RANK'] == '2' else 0)\n";
  auto r = testing::run_command("cd " + dir.str() + " && " + path + testing::nanoddp_binary() +
                                " run --standalone --nproc_per_node 3 --max_restarts 1 ddp.py");
  ASSERT_EQ(r.status, 0) << r.output;
  for (int restart = 0; restart < 2; restart++)
    for (int rank = 0; rank < 3; rank++)
      EXPECT_NE(r.output.find(fmt::format("[rank {}]: sum 6 rank {} of 3 restart {}", rank, rank, restart)),
                std::string::npos)
          << r.output;
}

// The Python for scripts and -m modules: --python, else NANODDP_PYTHON, else python3 on PATH. A
// stand-in interpreter shows which one ran and with what.
TEST(Launcher, ThePythonOfScriptsAndModulesIsSelectable) {
  ScratchDir dir("launcher_which_python");
  const std::string fake = dir.str("fakepy");
  std::ofstream(fake) << "#!/bin/sh\necho \"fake python $*\"\n";
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  std::ofstream(dir.str("show.py")) << "print('real python')\n";
  const std::string cd = "cd " + dir.str() + " && ";
  auto module = testing::run_command(cd + testing::nanoddp_binary() + " run --standalone --python " + fake +
                                     " -m pkg.mod --x 1");
  ASSERT_EQ(module.status, 0) << module.output;
  EXPECT_NE(module.output.find("[rank 0]: fake python -m pkg.mod --x 1"), std::string::npos) << module.output;
  auto script = testing::run_command(cd + "NANODDP_PYTHON=" + fake + " " + testing::nanoddp_binary() +
                                     " run --standalone show.py");
  ASSERT_EQ(script.status, 0) << script.output;
  EXPECT_NE(script.output.find("[rank 0]: fake python show.py"), std::string::npos) << script.output;
  auto missing = testing::run_command(cd + testing::nanoddp_binary() + " run --standalone --python no_such_python_xyz "
                                      "show.py");
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("--python no_such_python_xyz is not an executable program on PATH"), std::string::npos)
      << missing.output;
}

// Note [result lines]: rank 0's JSON object lines (eval's result) reach stdout without the prefix,
// so that they can be piped into jq; every other line, and other ranks' JSON, keep theirs.
TEST(Launcher, RankZerosJsonLinesReachStdoutBare) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2"}, {"--json_line", "--lines", "1"}));
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  std::vector<std::string> lines;
  std::istringstream in(p.out());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  auto has = [&](const std::string& l) { return std::find(lines.begin(), lines.end(), l) != lines.end(); };
  EXPECT_TRUE(has(R"({"rank": 0, "accuracy": 0.5})")) << p.out();
  EXPECT_TRUE(has(R"([rank 1]: {"rank": 1, "accuracy": 0.5})")) << p.out();
  EXPECT_TRUE(has("[rank 0]: line 0 of rank 0")) << p.out();
}

// Variables of other tools that do nothing for nanoddp's workers are named once at the start.
TEST(Launcher, KnownIgnoredVariablesAreNoted) {
  Proc p(launch({"--standalone"}, {}), {"WANDB_RUN=speedrun"});
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  EXPECT_NE(p.err().find("nanoddp run: note: WANDB_RUN=speedrun is set: "), std::string::npos) << p.err();
}

// Workers that together run more threads than the host has cores are a warning: here the user's
// OMP_NUM_THREADS, twice the cores for one worker.
TEST(Launcher, MoreThreadsThanCoresIsAWarning) {
  const int cores = int(::sysconf(_SC_NPROCESSORS_ONLN));
  Proc p(launch({"--standalone"}, {}), {"OMP_NUM_THREADS=" + std::to_string(2 * cores)});
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  EXPECT_NE(p.err().find(fmt::format("runs 1 worker(s) with {} threads in all on {} cores", 2 * cores, cores)),
            std::string::npos) << p.err();
  EXPECT_NE(p.err().find(fmt::format("set OMP_NUM_THREADS={}", cores)), std::string::npos) << p.err();
}

TEST(Launcher, NanoddpSubcommandRunsThisExecutable) {
  // `env` joins the job on every rank; rank 0's table counts the ranks that reported to it.
  Proc p({testing::nanoddp_binary(), "run", "--standalone", "--nproc-per-node", "2", "env"});
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  EXPECT_NE(p.out().find("[rank 0]: nanoddp version"), std::string::npos) << p.all();
  EXPECT_NE(p.out().find("ranks 0-1, 2 ranks)"), std::string::npos) << p.all();
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

// What a worker started in a session of its own (setsid, subprocess's start_new_session) is out of
// reach of the group signals; it is killed by pid once it is the launcher's, after the job ends
// and after a failed attempt alike. Was: it outlived the job, maybe holding a GPU.
TEST(Launcher, WhatLeftTheWorkersGroupsIsKilledToo) {
  Proc ok(launch({"--standalone", "--nproc_per_node", "2"}, {"--pid", "--spawn_session_child"}));
  auto left = wait_for_pids(ok, 2, "session child pid");
  ASSERT_EQ(ok.wait_exit(20s), 0) << ok.all();
  expect_all_gone(left, "session child of a successful attempt");
  Proc failed(launch({"--standalone", "--nproc_per_node", "2", "--max_restarts", "1"},
                     {"--pid", "--spawn_session_child", "--fail_rank", "1", "--fail_until_restart", "1",
                      "--fail_delay", "1"}));
  auto first = wait_for_pids(failed, 2, "session child pid");
  ASSERT_TRUE(failed.wait_for_text("restarting every worker")) << failed.all();
  expect_all_gone(first, "session child of the failed attempt, at the restart");
  ASSERT_EQ(failed.wait_exit(20s), 0) << failed.all();
}

TEST(Launcher, SigtermEscalatesToSigkillForWorkersThatIgnoreIt) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2", "--stop_timeout", "0.5"},
                {"--pid", "--ignore_term", "--sleep", "60"}));
  auto pids = wait_for_pids(p, 2);
  ::kill(p.pid(), SIGTERM);
  ASSERT_EQ(p.wait_exit(10s), 143) << p.all();
  EXPECT_NE(p.err().find("2 worker(s) still running 0."), std::string::npos) << p.err();  // 0.5 s and a poll
  EXPECT_NE(p.err().find(" s after SIGTERM; sending SIGKILL (--stop_timeout 0.5 s)"), std::string::npos)
      << p.err();
  expect_all_gone(pids, "worker");
}

// SIGHUP (a closed terminal, a lost ssh session) stops the job as SIGTERM does: it reaches the
// workers, and they get the time a save needs (Note [a stop that saves]). Their save here takes
// 6 s, more than the 5 s the launcher gave before SIGKILL: was, killed in the middle of the save
// (and at once by a second SIGHUP).
TEST(Launcher, SighupReachesTheWorkersAndTheLauncherWaitsForTheirSave) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2"}, {"--pid", "--save_on_signal", "6", "--sleep", "120"}));
  auto pids = wait_for_pids(p, 2);
  ::kill(p.pid(), SIGHUP);
  // A hangup may come twice (the shell passes its SIGHUP on, the kernel sends the terminal's
  // foreground group one when the shell exits): the second must not kill the saving workers.
  ASSERT_TRUE(p.wait_for([](const std::string& s) { return lines_by_rank(s, "saving after").size() == 2; })) << p.all();
  ::kill(p.pid(), SIGHUP);
  ASSERT_EQ(p.wait_exit(90s), 128 + SIGHUP) << p.all();
  auto saved = lines_by_rank(p.out(), "saved after");
  ASSERT_EQ(saved.size(), 2u) << p.all();
  for (auto& [rank, lines] : saved) EXPECT_EQ(lines, std::vector<std::string>{"SIGHUP"}) << "rank " << rank;
  EXPECT_EQ(p.err().find("SIGKILL"), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("received SIGHUP; stopping 2 worker(s) with SIGHUP: they have up to 30.0 s to save "
                         "(--stop_timeout auto: 30 s, no save reported yet); a second Ctrl-C or SIGTERM kills them "
                         "at once"),
            std::string::npos)
      << p.err();
  EXPECT_TRUE(std::regex_search(p.err(), std::regex("waited [0-9.]+ s for the workers to save and exit after SIGHUP")))
      << p.err();
  expect_all_gone(pids, "worker");
}

// "auto" sizes the grace from the last save a worker reported in NANODDP_SAVE_SECONDS_FILE: 30 s
// plus twice the longest. Without a report the grace is 30 s; the workers here report 40 s.
TEST(Launcher, TheGraceOfAStopGrowsWithTheLastSaveTheWorkersReported) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2"},
                {"--report_save", "40", "--save_on_signal", "0.1", "--sleep", "120"}));
  ASSERT_TRUE(p.wait_for([](const std::string& s) { return lines_by_rank(s, "reported save").size() == 2; }))
      << p.all();
  auto files = lines_by_rank(p.out(), "reported save");
  EXPECT_NE(files[0].front(), files[1].front()) << "one file per local rank";
  for (auto& [rank, f] : files) EXPECT_TRUE(std::filesystem::exists(f.front())) << f.front();
  ::kill(p.pid(), SIGTERM);
  ASSERT_EQ(p.wait_exit(60s), 128 + SIGTERM) << p.all();
  EXPECT_NE(p.err().find("they have up to 110.0 s to save (--stop_timeout auto: 30 s, plus twice the last save's "
                         "40.0 s)"),
            std::string::npos)
      << p.err();
  EXPECT_EQ(lines_by_rank(p.out(), "saved after").size(), 2u) << p.all();
  // The launcher's folder of these files goes with it.
  for (auto& [rank, f] : files) EXPECT_FALSE(std::filesystem::exists(f.front())) << f.front();
}

// A failure report starts with the root cause: the worker that failed, with its exit code, and only
// then the stop of the others (here one that ignores SIGTERM and needs SIGKILL). Was: "still running
// ... sending SIGKILL" first, the cause after it.
TEST(Launcher, TheRootCauseComesBeforeTheStopOfTheOtherWorkers) {
  // --store: rank 1 fails only once every rank has started, rank 0's SIGTERM ignored by then.
  Proc p(launch({"--standalone", "--nproc_per_node", "2", "--stop_timeout", "0.5"},
                {"--ignore_term", "--store", "--fail_rank", "1", "--fail_until_restart", "1", "--sleep", "60"}));
  ASSERT_EQ(p.wait_exit(30s), 1) << p.all();
  const std::string err = p.err();
  const size_t cause = err.find("rank 1 (local 1 on "), kill = err.find("still running");
  ASSERT_NE(cause, std::string::npos) << err;
  ASSERT_NE(kill, std::string::npos) << err;
  EXPECT_LT(cause, kill) << err;
  EXPECT_NE(err.find("exited with code 1"), std::string::npos) << err;
}

// The launcher passes on the signal it received, as torchrun does: a worker that ignores SIGTERM
// still ends at once on the SIGINT. Was: SIGINT reached the workers as SIGTERM.
TEST(Launcher, SigintReachesTheWorkersAsSigint) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2", "--stop_timeout", "30"},
                {"--pid", "--ignore_term", "--sleep", "60"}));
  auto pids = wait_for_pids(p, 2);
  ::kill(p.pid(), SIGINT);
  ASSERT_EQ(p.wait_exit(20s), 130) << p.all();
  EXPECT_EQ(p.err().find("SIGKILL"), std::string::npos) << p.err();
  expect_all_gone(pids, "worker");
}

// SIGQUIT (Ctrl-backslash) is one of torchrun's termination signals too: passed on, exit 128 + 3. Was: not
// handled, so the launcher dumped core and its workers were killed without a word to the others.
TEST(Launcher, SigquitIsPassedOnLikeTheOtherTerminationSignals) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2"}, {"--pid", "--sleep", "60"}));
  auto pids = wait_for_pids(p, 2);
  ::kill(p.pid(), SIGQUIT);
  ASSERT_EQ(p.wait_exit(20s), 128 + SIGQUIT) << p.all();
  EXPECT_NE(p.err().find("received SIGQUIT"), std::string::npos) << p.err();
  expect_all_gone(pids, "worker");
}

// A Ctrl-C while a failed attempt's workers are being stopped ends the job instead of restarting
// it. Was: "restarting every worker (restart 1 of --max_restarts 3)", then the new group was
// stopped again.
TEST(Launcher, ASignalWhileStoppingAFailedAttemptPreventsTheRestart) {
  Proc p(launch({"--standalone", "--nproc_per_node", "2", "--max_restarts", "3", "--stop_timeout", "30"},
                {"--ignore_term", "--fail_rank", "1", "--fail_until_restart", "5", "--fail_delay", "1", "--sleep",
                 "60"}));
  // Rank 1 fails 1 s in, when rank 0 surely ignores SIGTERM: the launcher then waits up to 30 s.
  ASSERT_TRUE(p.wait_for_text("failing on restart 0")) << p.all();
  std::this_thread::sleep_for(1s);
  ::kill(p.pid(), SIGINT);
  ASSERT_EQ(p.wait_exit(20s), 130) << p.all();
  EXPECT_EQ(p.err().find("restarting every worker"), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("received SIGINT while stopping the workers: no restart"), std::string::npos) << p.err();
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
// Bad input: the port of the store is taken.

// A --master_bind address that is not this host's: one line naming the flag.
TEST(Launcher, AMasterBindThatIsNotAnAddressOfThisHostIsNamed) {
  // 192.0.2.1 (TEST-NET-1, RFC 5737): documentation only, never a local address.
  Proc p(launch({"--master_bind", "192.0.2.1", "--master_port", std::to_string(testing::free_port())}, {}));
  ASSERT_EQ(p.wait_exit(), 1) << p.all();
  EXPECT_NE(p.err().find("nanoddp: error: --master_bind 192.0.2.1: cannot listen on 192.0.2.1:"), std::string::npos)
      << p.err();
}

TEST(Launcher, PortInUseOnNodeZero) {
  int port = 0;
  net::Fd taken = net::listen_tcp("", 0, &port);
  Proc p(launch({"--master_port", std::to_string(port)}, {}));
  ASSERT_EQ(p.wait_exit(), 1) << p.all();
  EXPECT_NE(p.err().find(fmt::format("port {} on this host is already in use", port)), std::string::npos) << p.err();
}

}  // namespace
}  // namespace nanoddp::dist
