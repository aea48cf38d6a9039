// Distributed training as users run it: the nanoddp binary, several processes, Gloo over TCP.
//  - 2 ranks x 1 micro-step equal 1 rank x 2 micro-steps, bit for bit;
//  - kill -9 of a rank mid-run: without restarts the launcher names it and nothing is left; with
//    --max_restarts 1 the job resumes from its checkpoint and ends exactly like a straight run;
//  - a resume onto another world size and --zero continues like the straight run;
//  - a rank that stalls makes the others fail with the collective timeout naming it;
//  - two hosts (network namespaces) train like two processes on one host;
//  - bad input: mismatched flags across ranks, a batch the world size does not divide,
//    a port in use, an unreachable master.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <cstdio>
#include <netinet/in.h>
#include <sys/socket.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/safetensors.h"
#include "corpus.h"
#include "subprocess.h"
#include "run_outputs.h"
#include "test_util.h"
#include "train/run_lock.h"
#include "two_hosts.h"

namespace nanoddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::nanoddp_argv;
using testing::nanoddp_run_argv;
using testing::Proc;
using testing::ScratchDir;

const std::string& dataset() { return testing::process_byte_dataset("dist_train_dataset"); }

// `nanoddp train` flags of a tiny model; the caller adds batch, steps and output.
std::vector<std::string> train_flags(const std::string& out, int64_t total_batch, int steps) {
  return {"train", "--data", dataset(), "--out", out, "--depth", "2", "--aspect_ratio", "32", "--head_dim", "32",
          "--max_seq_len", "32", "--device_batch_size", "4", "--total_batch_size", std::to_string(total_batch),
          "--num_iterations", std::to_string(steps), "--eval_every", "4", "--eval_tokens", "512", "--threads", "1",
          "--peak_flops", "1e9", "--timeout", "20"};
}

std::map<int64_t, double> losses(const std::string& out) { return testing::training_losses(out); }

std::vector<float> final_weights(const std::string& out, int step) {
  return testing::checkpoint_weights(fmt::format("{}/checkpoints/step_{:06d}", out, step));
}

// The pid of the worker with RANK=rank among the launcher's children.
pid_t worker_pid(pid_t launcher, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid != launcher) continue;
    std::ifstream env(entry.path() / "environ");
    std::string var;
    while (std::getline(env, var, '\0'))
      if (var == "RANK=" + std::to_string(rank)) return std::stoi(name);
  }
  return -1;
}

bool alive(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

struct Mode {
  int zero;
  std::string optimizer;
  std::string dtype = "fp32";
};

class TwoRanks : public ::testing::TestWithParam<Mode> {};

TEST_P(TwoRanks, EqualOneRankWithTwoAccumulationSteps) {
  auto [zero, opt, dtype] = GetParam();
  ScratchDir one(fmt::format("dist_equiv_one_{}_{}_{}", zero, opt, dtype)),
      two(fmt::format("dist_equiv_two_{}_{}_{}", zero, opt, dtype));
  // f32 Newton-Schulz: bf16 turns reduction-order differences into percents (test_torch_golden).
  // bf16 activations keep the equality: each micro-batch's rows are computed and rounded alike.
  std::vector<std::string> mode = {"--zero", std::to_string(zero), "--optimizer", opt, "--muon_precision", "f32",
                                   "--dtype", dtype};
  // fp16: a loss scale that overflows every third step; the skipped steps are the same and the
  // run ends bit for bit where one rank ends. (That one rank's overflow reaches every rank through
  // the all-reduced flag is tested in tests/ddp: LossScaling.)
  if (dtype == "fp16") mode.insert(mode.end(), {"--loss_scale_init", "16777216", "--loss_scale_growth_interval", "2"});
  auto a = train_flags(one.str(), 4 * 32 * 2, 8), b = train_flags(two.str(), 4 * 32 * 2, 8);
  a.insert(a.end(), mode.begin(), mode.end());
  b.insert(b.end(), mode.begin(), mode.end());
  Proc p1(nanoddp_argv(a)), p2(nanoddp_run_argv(2, {}, b));
  ASSERT_EQ(p1.wait_exit(120s), 0) << p1.all();
  ASSERT_EQ(p2.wait_exit(120s), 0) << p2.all();
  auto la = losses(one.str()), lb = losses(two.str());
  ASSERT_EQ(la.size(), 8u);
  ASSERT_EQ(lb.size(), 8u);
  // Bit for bit, on any CPU: Note [accumulation order] in model/gpt.cpp.
  EXPECT_EQ(lb, la);
  EXPECT_EQ(final_weights(two.str(), 8), final_weights(one.str(), 8));
  EXPECT_NE(p2.out().find("2 ranks x 4 rows x 32 tokens x 1 accumulation"), std::string::npos) << p2.out();
  if (dtype == "fp16") {
    const auto skipped = testing::training_metric(two.str(), "skipped");
    EXPECT_EQ(skipped, testing::training_metric(one.str(), "skipped"));
    int n = 0;
    for (auto [step, s] : skipped) n += s != 0;
    EXPECT_GE(n, 2) << "the loss scale never overflowed: nothing was tested";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, TwoRanks,
                         ::testing::Values(Mode{0, "muon"}, Mode{1, "adamw"}, Mode{2, "muon"}, Mode{2, "adamw"},
                                           Mode{0, "muon", "bf16"}, Mode{2, "muon", "fp16"}),
                         [](const auto& info) {
                           return "zero" + std::to_string(info.param.zero) + "_" + info.param.optimizer +
                                  (info.param.dtype == "fp32" ? "" : "_" + info.param.dtype);
                         });

TEST(Failure, KillNineOfARankEndsTheJobOrRestartsItExactly) {
  ScratchDir straight("dist_kill_straight"), killed("dist_kill_restart"), fatal("dist_kill_fatal");
  const int steps = 24;
  auto flags = [&](const std::string& out) {
    auto f = train_flags(out, 4 * 32 * 2, steps);
    f.insert(f.end(), {"--save_every", "3"});
    return f;
  };
  Proc reference(nanoddp_run_argv(2, {}, flags(straight.str())));
  ASSERT_EQ(reference.wait_exit(180s), 0) << reference.all();

  // Without restarts: the launcher stops the job within 10 s, names rank 1, leaves nothing behind.
  {
    Proc job(nanoddp_run_argv(2, {}, flags(fatal.str())));
    ASSERT_TRUE(job.wait_for_text("step 00005/", 120s)) << job.all();
    const pid_t r0 = worker_pid(job.pid(), 0), r1 = worker_pid(job.pid(), 1);
    ASSERT_GT(r1, 0);
    const auto t0 = std::chrono::steady_clock::now();
    ::kill(r1, SIGKILL);
    auto status = job.wait_exit(10s);
    ASSERT_TRUE(status.has_value()) << "the launcher did not exit within 10 s\n" << job.all();
    EXPECT_NE(*status, 0);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
    EXPECT_NE(job.err().find("rank 1"), std::string::npos) << job.err();
    EXPECT_NE(job.err().find("SIGKILL"), std::string::npos) << job.err();
    EXPECT_FALSE(alive(r0)) << "rank 0 survived the launcher";
  }

  // With --max_restarts 1: the group restarts, resumes from the newest checkpoint, and ends with
  // the straight run's weights and losses, bit for bit, whenever the kill landed.
  Proc job(nanoddp_run_argv(2, {"--max_restarts", "1"}, flags(killed.str())));
  ASSERT_TRUE(job.wait_for_text("step 00007/", 120s)) << job.all();
  ::kill(worker_pid(job.pid(), 1), SIGKILL);
  ASSERT_EQ(job.wait_exit(180s), 0) << job.all();
  EXPECT_NE(job.all().find("resumed from"), std::string::npos) << job.all();
  EXPECT_EQ(final_weights(killed.str(), steps), final_weights(straight.str(), steps));
  auto want = losses(straight.str()), got = losses(killed.str());
  EXPECT_EQ(got, want);
}

TEST(Failure, AStalledRankMakesTheOthersFailWithTheTimeout) {
  ScratchDir out("dist_stall");
  auto f = train_flags(out.str(), 4 * 32 * 2, 200);
  f.back() = "3";  // --timeout 3
  Proc job(nanoddp_run_argv(2, {}, f));
  ASSERT_TRUE(job.wait_for_text("step 00003/", 120s)) << job.all();
  const pid_t r1 = worker_pid(job.pid(), 1);
  ::kill(r1, SIGSTOP);  // a real stall: the process is alive but does nothing
  auto status = job.wait_exit(60s);
  ASSERT_TRUE(status.has_value()) << job.all();
  EXPECT_NE(*status, 0);
  const std::string all = job.all();
  EXPECT_NE(all.find("timed out after 3 s"), std::string::npos) << all;
  EXPECT_NE(all.find("rank 1"), std::string::npos) << all;
  EXPECT_NE(all.find("had not reached it"), std::string::npos) << all;
  EXPECT_FALSE(alive(r1)) << "the stalled rank was left behind";
}

class TwoHostTraining : public testing::TwoHosts {};

TEST_F(TwoHostTraining, TrainsLikeTwoProcessesOnOneHost) {
  ScratchDir local("dist_two_hosts_local"), hosts("dist_two_hosts");
  Proc reference(nanoddp_run_argv(2, {}, train_flags(local.str(), 4 * 32 * 2, 6)));
  ASSERT_EQ(reference.wait_exit(120s), 0) << reference.all();
  auto node = [&](int i) {
    std::vector<std::string> argv = {testing::nanoddp_binary(), "run", "--nnodes", "2", "--node_rank",
                                     std::to_string(i), "--nproc_per_node", "1", "--master_addr", addr(0),
                                     "--master_port", "29631"};
    auto t = train_flags(hosts.str(), 4 * 32 * 2, 6);
    argv.insert(argv.end(), t.begin(), t.end());
    return on_host(i, argv);
  };
  Proc n0(node(0)), n1(node(1));
  ASSERT_EQ(n0.wait_exit(120s), 0) << n0.all();
  ASSERT_EQ(n1.wait_exit(120s), 0) << n1.all();
  EXPECT_EQ(losses(hosts.str()), losses(local.str()));
  EXPECT_EQ(final_weights(hosts.str(), 6), final_weights(local.str(), 6));
}

using nanoddp::testing::free_port;

// Other launchers: Open MPI's mpirun (the MPI backend) and Slurm's srun (simulated here by the
// variables srun sets; Gloo with the store on the first host of the node list).
TEST(OtherLaunchers, MpirunAndSrunTrainLikeOneRankWithTwoAccumulationSteps) {
  ScratchDir one("dist_launchers_one"), mpi("dist_launchers_mpi"), slurm("dist_launchers_srun");
  Proc ref(nanoddp_argv(train_flags(one.str(), 4 * 32 * 2, 6)));
  ASSERT_EQ(ref.wait_exit(120s), 0) << ref.all();
  const auto want = losses(one.str());
  ASSERT_EQ(want.size(), 6u);

  auto which = testing::run_command("command -v mpirun");
  if (which.status == 0) {
    std::vector<std::string> argv = {which.output.substr(0, which.output.find('\n')), "--allow-run-as-root",
                                     "--oversubscribe", "-np", "2", testing::nanoddp_binary()};
    auto t = train_flags(mpi.str(), 4 * 32 * 2, 6);
    argv.insert(argv.end(), t.begin(), t.end());
    Proc job(argv, {"MASTER_ADDR", "MASTER_PORT", "OMPI_MCA_plm_rsh_agent="});
    ASSERT_EQ(job.wait_exit(120s), 0) << job.all();
    EXPECT_NE(job.all().find("| backend mpi"), std::string::npos) << job.all();
    const auto got = losses(mpi.str());
    ASSERT_EQ(got.size(), want.size());
    // Bit for bit, on any CPU: Note [accumulation order] in model/gpt.cpp.
    EXPECT_EQ(got, want) << "mpirun";
    EXPECT_EQ(final_weights(mpi.str(), 6), final_weights(one.str(), 6)) << "mpirun";
  } else {
    std::printf("mpirun not installed (openmpi-bin): its part is skipped\n");
  }

  const std::string port = std::to_string(free_port());
  auto srun_env = [&](int rank) {
    return std::vector<std::string>{"SLURM_PROCID=" + std::to_string(rank), "SLURM_STEP_ID=0", "SLURM_NTASKS=2",
                                    "SLURM_LOCALID=" + std::to_string(rank), "SLURM_NTASKS_PER_NODE=2",
                                    "SLURM_NODEID=0", "SLURM_JOB_NODELIST=localhost", "MASTER_PORT=" + port,
                                    "MASTER_ADDR",
                                    // a real Slurm step's own would win over the ones above
                                    "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
  };
  Proc r0(nanoddp_argv(train_flags(slurm.str(), 4 * 32 * 2, 6)), srun_env(0));
  Proc r1(nanoddp_argv(train_flags(slurm.str(), 4 * 32 * 2, 6)), srun_env(1));
  ASSERT_EQ(r0.wait_exit(120s), 0) << r0.all();
  ASSERT_EQ(r1.wait_exit(120s), 0) << r1.all();
  EXPECT_NE(r0.all().find("| backend gloo"), std::string::npos) << r0.all();
  const auto got = losses(slurm.str());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got, want) << "srun";
  EXPECT_EQ(final_weights(slurm.str(), 6), final_weights(one.str(), 6)) << "srun";
}

// Two ranks started by hand (no launcher): rank 0 hosts the store.
std::vector<std::string> env_of(int rank, int port) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=2", "LOCAL_RANK=" + std::to_string(rank),
          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)};
}


// Without the launcher, rank 0 hosts the store. When it freezes, the other rank's collective times
// out and its diagnosis asks the store, which no longer answers: that request gives up after five
// heartbeat intervals (at least 5 s), so the rank reports within the timeout and a few seconds more.
// Was: the store client's 120 s, deaf to SIGTERM meanwhile.
TEST(Failure, ARankWhoseStoreHostFreezesReportsWithinTheTimeout) {
  ScratchDir out("dist_store_host_frozen");
  auto f = train_flags(out.str(), 4 * 32 * 2, 200);
  f.back() = "3";  // --timeout 3: heartbeats every 0.3 s, store requests give up after 5 s
  const int port = free_port();
  Proc r0(nanoddp_argv(f), env_of(0, port)), r1(nanoddp_argv(f), env_of(1, port));
  ASSERT_TRUE(r0.wait_for_text("step 00003/", 120s)) << r0.all();
  ::kill(r0.pid(), SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  const auto status = r1.wait_exit(60s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::kill(r0.pid(), SIGKILL);
  ASSERT_TRUE(status.has_value()) << "rank 1 still waits 60 s after rank 0 froze:\n" << r1.all();
  EXPECT_NE(*status, 0) << r1.all();
  // 3 s timeout + 0.45 s diagnosis + 5 s store request, with room for a loaded machine; 120 s before.
  EXPECT_LT(seconds, 40.0) << r1.all();
  EXPECT_NE(r1.err().find("timed out after 3 s"), std::string::npos) << r1.err();
}

TEST(BadInput, RanksStartedWithDifferentDepthsRefuseToTrain) {
  ScratchDir out("dist_bad_depth");
  const int port = free_port();
  auto f0 = train_flags(out.str(), -1, 4), f1 = f0;
  f1[6] = "3";  // --depth 3 on rank 1
  ASSERT_EQ(f1[5], "--depth");
  Proc r0(nanoddp_argv(f0), env_of(0, port)), r1(nanoddp_argv(f1), env_of(1, port));
  EXPECT_EQ(r0.wait_exit(60s), 1) << r0.all();
  EXPECT_EQ(r1.wait_exit(60s), 1) << r1.all();
  EXPECT_NE(r1.err().find("--depth is 3 on rank 1 but 2 on rank 0"), std::string::npos) << r1.err();
  EXPECT_NE(r0.err().find("rank 1"), std::string::npos) << r0.err();
}

// Ranks that see different checkpoints under the same --out (a folder not shared between nodes;
// here: a relative --out from two working directories) stop together, the rank that differs naming
// what it found, before any of them loads anything.
TEST(BadInput, RanksThatFindDifferentCheckpointsToResumeStopTogether) {
  ScratchDir root("dist_resume_mismatch");
  fs::create_directories(root.str("r0"));
  fs::create_directories(root.str("r1"));
  Proc first(nanoddp_argv(train_flags(root.str("r0/run"), 4 * 32 * 2, 2)));
  ASSERT_EQ(first.wait_exit(60s), 0) << first.all();
  const int port = free_port();
  auto in_dir = [&](const std::string& dir) {
    std::string cmd = "cd '" + dir + "' && exec";
    for (const auto& a : nanoddp_argv(train_flags("run", 4 * 32 * 2, 4))) cmd += " '" + a + "'";
    return std::vector<std::string>{"/bin/sh", "-c", cmd + " --resume latest"};
  };
  Proc r0(in_dir(root.str("r0")), env_of(0, port)), r1(in_dir(root.str("r1")), env_of(1, port));
  EXPECT_EQ(r0.wait_exit(60s), 1) << r0.all();
  EXPECT_EQ(r1.wait_exit(60s), 1) << r1.all();
  EXPECT_NE(r1.err().find("the checkpoint to resume is none"), std::string::npos) << r1.err();
  EXPECT_NE(r1.err().find("same --out"), std::string::npos) << r1.err();
  EXPECT_NE(r0.err().find("rank 1"), std::string::npos) << r0.err();
}

// One writer per run folder: rank 0 alone takes the folder's lock, and when another run holds it
// (here this test process), rank 0 names the holder and the other rank learns of it at once
// instead of waiting in a collective for a rank 0 that has gone.
TEST(BadInput, ARunFolderInUseStopsEveryRank) {
  ScratchDir root("dist_folder_in_use");
  train::RunLock held(root.str("run"));
  const int port = free_port();
  Proc r0(nanoddp_argv(train_flags(root.str("run"), 4 * 32 * 2, 4)), env_of(0, port));
  Proc r1(nanoddp_argv(train_flags(root.str("run"), 4 * 32 * 2, 4)), env_of(1, port));
  EXPECT_EQ(r0.wait_exit(60s), 1) << r0.all();
  EXPECT_EQ(r1.wait_exit(60s), 1) << r1.all();
  EXPECT_NE(r0.err().find(fmt::format("is in use by another run (pid {} on host", ::getpid())), std::string::npos)
      << r0.err();
  EXPECT_NE(r1.err().find("rank 0 could not take --out"), std::string::npos) << r1.err();
}

TEST(BadInput, WorldSizeThatDoesNotDivideTheBatch) {
  ScratchDir out("dist_bad_world");
  Proc job(nanoddp_run_argv(3, {}, train_flags(out.str(), 4 * 32 * 2, 4)));  // 256 tokens over 3 x 128
  EXPECT_NE(job.wait_exit(60s).value_or(0), 0);
  EXPECT_NE(job.all().find("is not a multiple of device_batch_size x max_seq_len x world size = 4 x 32 x 3"),
            std::string::npos)
      << job.all();
}

// Resume onto another world size (and --zero): the optimizer state is resharded and the loader's
// global cursor carries over, so the run continues as a straight run would. 2 -> 1 is exact (one
// rank with twice the accumulation adds in the same order as two ranks); 1 -> 3 is not (a 3-way
// sum rounds differently), see the tolerance below.
TEST(Resharding, TwoRanksResumedOnOneEqualTheStraightRunBitForBit) {
  ScratchDir straight("reshard_2_straight"), split("reshard_2_split");
  auto flags = [](const std::string& out, const char* zero) {
    auto f = train_flags(out, 4 * 32 * 2, 8);
    f.insert(f.end(), {"--zero", zero});
    return f;
  };
  Proc a(nanoddp_run_argv(2, {}, flags(straight.str(), "1")));
  ASSERT_EQ(a.wait_exit(120s), 0) << a.all();
  auto first = flags(split.str(), "1");
  first.insert(first.end(), {"--stop_at", "4"});
  Proc b(nanoddp_run_argv(2, {}, first));
  ASSERT_EQ(b.wait_exit(120s), 0) << b.all();
  auto rest = flags(split.str(), "0");
  rest.insert(rest.end(), {"--resume", "latest"});
  Proc c(nanoddp_argv(rest));
  ASSERT_EQ(c.wait_exit(120s), 0) << c.all();
  EXPECT_NE(c.all().find("resharded the optimizer state of 2 rank(s)"), std::string::npos) << c.all();
  auto la = losses(straight.str()), lb = losses(split.str());
  ASSERT_EQ(la.size(), 8u);
  ASSERT_EQ(lb.size(), 8u);
  for (auto& [step, loss] : la) EXPECT_EQ(loss, lb[step]) << "step " << step;
  EXPECT_EQ(final_weights(straight.str(), 8), final_weights(split.str(), 8));
}

// --zero 0 (the default) saves the whole state on every rank; resuming it on another world size
// reads one copy. Was: "covers 40960 of 20480 elements" (every rank's copy counted).
TEST(Resharding, ReplicatedStateOfTwoRanksResumesOnOneBitForBit) {
  ScratchDir straight("reshard_z0_straight"), split("reshard_z0_split");
  auto flags = [](const std::string& out) { return train_flags(out, 4 * 32 * 2, 8); };
  Proc a(nanoddp_run_argv(2, {}, flags(straight.str())));
  ASSERT_EQ(a.wait_exit(120s), 0) << a.all();
  auto first = flags(split.str());
  first.insert(first.end(), {"--stop_at", "4"});
  Proc b(nanoddp_run_argv(2, {}, first));
  ASSERT_EQ(b.wait_exit(120s), 0) << b.all();
  auto rest = flags(split.str());
  rest.insert(rest.end(), {"--resume", "latest"});
  Proc c(nanoddp_argv(rest));
  ASSERT_EQ(c.wait_exit(120s), 0) << c.all();
  EXPECT_NE(c.all().find("resharded the optimizer state of 2 rank(s) (--zero 0)"), std::string::npos) << c.all();
  auto la = losses(straight.str()), lb = losses(split.str());
  ASSERT_EQ(lb.size(), 8u);
  for (auto& [step, loss] : la) EXPECT_EQ(loss, lb[step]) << "step " << step;
  EXPECT_EQ(final_weights(straight.str(), 8), final_weights(split.str(), 8));
}

// Under --zero 1 the buckets decide where each rank's piece of the AdamW state ends: other bucket
// sizes on resume read the pieces as resharding does. Was: "tensor 'adamw.m.lm_head.weight@0' is
// f32 [20480] but f32 [10240] was expected".
TEST(Resharding, OtherBucketSizesUnderZeroOneResume) {
  ScratchDir split("reshard_buckets");
  auto first = train_flags(split.str(), 4 * 32 * 2, 6);
  first.insert(first.end(), {"--zero", "1", "--stop_at", "3"});
  Proc b(nanoddp_run_argv(2, {}, first));
  ASSERT_EQ(b.wait_exit(120s), 0) << b.all();
  auto rest = train_flags(split.str(), 4 * 32 * 2, 6);
  rest.insert(rest.end(),
              {"--zero", "1", "--resume", "latest", "--first_bucket_mb", "0.05", "--bucket_cap_mb", "0.05"});
  Proc c(nanoddp_run_argv(2, {}, rest));
  ASSERT_EQ(c.wait_exit(120s), 0) << c.all();
  EXPECT_NE(c.all().find("resharded the optimizer state of 2 rank(s) (--zero 1)"), std::string::npos) << c.all();
}

TEST(Resharding, OneRankResumedOnThreeContinuesLikeTheStraightRun) {
  ScratchDir straight("reshard_3_straight"), split("reshard_3_split");
  auto flags = [](const std::string& out) { return train_flags(out, 4 * 32 * 3, 8); };
  Proc a(nanoddp_argv(flags(straight.str())));
  ASSERT_EQ(a.wait_exit(120s), 0) << a.all();
  auto first = flags(split.str());
  first.insert(first.end(), {"--stop_at", "4"});
  Proc b(nanoddp_argv(first));
  ASSERT_EQ(b.wait_exit(120s), 0) << b.all();
  auto rest = flags(split.str());
  rest.insert(rest.end(), {"--resume", "latest", "--zero", "2"});
  Proc c(nanoddp_run_argv(3, {}, rest));
  ASSERT_EQ(c.wait_exit(180s), 0) << c.all();
  auto la = losses(straight.str()), lb = losses(split.str());
  ASSERT_EQ(la.size(), 8u);
  ASSERT_EQ(lb.size(), 8u);
  for (int64_t step = 1; step <= 4; step++) EXPECT_EQ(la[step], lb[step]) << "step " << step;  // before the resume
  // After it: the 3-rank gradients differ from the 1-rank ones by f32 reassociation (~1e-7
  // relative, tests/ddp's world-3 bound); four steps of Muon (bf16 Newton-Schulz) and AdamW turn
  // that into loss differences far below 1e-3 relative (3.3e-5 measured on AMD Zen 5), while a
  // wrong shard or data position shows as a difference of 1e-2 or more.
  double worst = 0;
  for (int64_t step = 5; step <= 8; step++) {
    EXPECT_NEAR(la[step], lb[step], 1e-3 * la[step]) << "step " << step;
    worst = std::max(worst, std::abs(la[step] - lb[step]) / la[step]);
  }
  std::printf("largest relative loss difference after the resume: %.3g\n", worst);
}

// SFT: conversations packed into rows and strided by rank train exactly as token shards
// do: 2 ranks equal 1 rank with 2 accumulation steps, bit for bit.
TEST(Sft, TwoRanksEqualOneRankWithTwoAccumulationStepsAndEvalCountsAlike) {
  ScratchDir base("sft_base"), one("sft_one"), two("sft_two"), tasks("sft_tasks");
  // A context of 128 tokens holds the arithmetic questions (97 tokens), so eval has room to answer.
  auto base_flags = train_flags(base.str(), 4 * 128, 4);
  base_flags.insert(base_flags.end(), {"--max_seq_len", "128"});
  Proc b(nanoddp_argv(base_flags));
  ASSERT_EQ(b.wait_exit(60s), 0) << b.all();
  const std::string convs = tasks.str("train.jsonl");
  Proc t(nanoddp_argv({"task", "--name", "arithmetic", "--count", "60", "--out", convs}));
  ASSERT_EQ(t.wait_exit(60s), 0) << t.all();
  auto sft = [&](const std::string& out) {
    return std::vector<std::string>{"sft", "--source", base.str(), "--data", convs, "--out", out,
                                    "--device_batch_size", "4", "--total_batch_size", std::to_string(4 * 128 * 2),
                                    "--num_iterations", "6", "--threads", "1", "--peak_flops", "1e9", "--timeout", "20"};
  };
  Proc a1(nanoddp_argv(sft(one.str())));
  ASSERT_EQ(a1.wait_exit(120s), 0) << a1.all();
  Proc a2(nanoddp_run_argv(2, {}, sft(two.str())));
  ASSERT_EQ(a2.wait_exit(120s), 0) << a2.all();
  auto l1 = losses(one.str()), l2 = losses(two.str());
  ASSERT_EQ(l1.size(), 6u);
  ASSERT_EQ(l2.size(), 6u);
  for (auto& [step, loss] : l1) EXPECT_EQ(loss, l2[step]) << "step " << step;
  EXPECT_EQ(final_weights(one.str(), 6), final_weights(two.str(), 6));
  // The checkpoint says what it is and where it came from.
  std::ifstream meta(one.str("checkpoints/step_000006/meta.json"));
  const auto j = nlohmann::json::parse(meta);
  EXPECT_EQ(j["stage"], "sft");
  EXPECT_NE(j["source"].get<std::string>().find("sft_base"), std::string::npos);

  // eval: 7 problems x 3 samples strided over 1 and 2 ranks (7 does not divide) count the same
  // answers: each (problem, sample) draws from its own stream, and the counts are summed exactly.
  auto eval = [&](int ranks) {
    std::vector<std::string> e = {"eval", "--checkpoint", one.str(), "--task", "arithmetic", "--count", "7",
                                  "--num_samples", "3", "--temperature", "1", "--max_tokens", "24", "--timeout", "20"};
    Proc p(ranks == 1 ? nanoddp_argv(e) : nanoddp_run_argv(ranks, {}, e));
    EXPECT_EQ(p.wait_exit(120s), 0) << p.all();
    const std::string out = p.out();
    const size_t brace = out.rfind('{');
    return nlohmann::json::parse(out.substr(brace, out.find('}', brace) - brace + 1));
  };
  const auto e1 = eval(1), e2 = eval(2);
  EXPECT_EQ(e1["n"], 21);
  EXPECT_EQ(e2["n"], 21);
  EXPECT_EQ(e1["correct"], e2["correct"]);
  EXPECT_EQ(e1["task"], "arithmetic");
  // pass@3: a problem passes when any of its 3 answers is right (nanochat's chat_eval), so it lies
  // between the problems all-correct answers alone could fill and the mean accuracy's floor.
  EXPECT_EQ(e1["passed"], e2["passed"]);
  const int64_t correct = e1["correct"], passed = e1["passed"];
  EXPECT_GE(passed, (correct + 2) / 3);
  EXPECT_LE(passed, std::min<int64_t>(correct, 7));
  EXPECT_DOUBLE_EQ(e1["pass_at_k"].get<double>(), passed / 7.0);
  // Ranks started with other eval flags (mpirun can give each its own) stop before counting, the
  // differing one naming the flag, as train's ranks do.
  {
    const std::string port = std::to_string(testing::free_port());
    std::vector<std::unique_ptr<Proc>> ranks;
    for (int r = 0; r < 2; r++) {
      ranks.push_back(std::make_unique<Proc>(
          nanoddp_argv({"eval", "--checkpoint", one.str(), "--task", "arithmetic", "--count", "3", "--max_tokens",
                  r == 0 ? "8" : "9", "--timeout", "20"}),
          std::vector<std::string>{"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r), "WORLD_SIZE=2",
                                   "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}));
    }
    for (auto& p : ranks) EXPECT_NE(p->wait_exit(60s), 0) << p->all();
    EXPECT_NE(ranks[1]->err().find("--max_tokens is 9 on rank 1 but 8 on rank 0: start every rank with the same "
                                   "arguments"),
              std::string::npos)
        << ranks[1]->err();
    EXPECT_NE(ranks[0]->err().find("rank 1 has settings that differ from rank 0's"), std::string::npos)
        << ranks[0]->err();
  }

  // chat --prompt answers once in chat format and exits; a message beyond the context is an error.
  Proc c(nanoddp_argv(
      {"chat", "--checkpoint", one.str(), "--prompt", "hi", "--max_tokens", "8", "--temperature", "0"}));
  EXPECT_EQ(c.wait_exit(60s), 0) << c.all();
  Proc too_long(nanoddp_argv({"chat", "--checkpoint", one.str(), "--prompt", std::string(200, 'x')}));
  EXPECT_EQ(too_long.wait_exit(60s), 1) << too_long.all();
  EXPECT_NE(too_long.err().find("longer than the model's context of 128"), std::string::npos) << too_long.err();
  // Interactive: a message beyond the context is refused and the chat goes on to the next one.
  Proc talk({"/bin/sh", "-c", fmt::format("printf '{}\\nhi\\nquit\\n' | '{}' chat --checkpoint '{}' --max_tokens 4 "
                                          "--temperature 0", std::string(200, 'x'), testing::nanoddp_binary(),
                                          one.str())});
  EXPECT_EQ(talk.wait_exit(60s), 0) << talk.all();
  EXPECT_NE(talk.out().find("say it in fewer words"), std::string::npos) << talk.out();
  EXPECT_EQ(talk.out().find("say it in fewer words", talk.out().find("say it in fewer words") + 1), std::string::npos)
      << "only the long message is refused: " << talk.out();
}

// --trace: one Chrome-format file with both ranks, each with its compute phases
// and its collectives on one time axis; the console ends with the run's summary.
TEST(Observability, TwoRankTraceHoldsBothRanksPhasesAndCollectives) {
  ScratchDir out("trace_two");
  auto flags = train_flags(out.str(), 4 * 32 * 2, 3);
  flags.push_back("--trace");
  Proc p(nanoddp_run_argv(2, {}, flags));
  ASSERT_EQ(p.wait_exit(120s), 0) << p.all();
  EXPECT_NE(p.out().find("done: 3 steps in "), std::string::npos) << p.out();
  EXPECT_NE(p.out().find("trace: "), std::string::npos) << p.out();
  std::ifstream in(out.str("trace.json"));
  const auto j = nlohmann::json::parse(in);  // the JSON object format: {"traceEvents": [...]}
  ASSERT_TRUE(j.contains("traceEvents") && j["traceEvents"].is_array());
  std::map<int, std::map<std::string, int>> count;                 // pid -> name -> events
  std::map<int, std::vector<std::pair<double, double>>> compute;   // pid -> top-level compute intervals
  std::map<int, std::vector<std::pair<double, double>>> backward;  // pid -> backward intervals
  std::map<int, std::vector<double>> launches;                     // pid -> bucket launch times
  for (const auto& e : j["traceEvents"]) {
    for (const char* key : {"name", "ph", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << e.dump();
    const int pid = e["pid"];
    const std::string name = e["name"], ph = e["ph"];
    count[pid][name]++;
    if (ph == "M") continue;
    ASSERT_TRUE(e.contains("ts")) << e.dump();
    const double ts = e["ts"];
    EXPECT_GE(ts, 0) << e.dump();
    if (ph == "i") {
      if (name == "launch bucket") launches[pid].push_back(ts);
      continue;
    }
    ASSERT_EQ(ph, "X") << e.dump();
    const double dur = e["dur"];
    EXPECT_GE(dur, 0) << e.dump();
    if (e["tid"] == 0) compute[pid].push_back({ts, ts + dur});
    if (name == "backward") backward[pid].push_back({ts, ts + dur});
    if (name == "allreduce") {
      EXPECT_EQ(e["tid"], 1) << e.dump();
      EXPECT_GT(e.value("args", nlohmann::json::object()).value("bytes", 0), 0) << e.dump();
    }
  }
  ASSERT_EQ(count.size(), 2u) << "one process per rank";
  for (int pid : {0, 1}) {
    EXPECT_EQ(count[pid]["process_name"], 1);
    // One micro-step per step on each rank (256 tokens = 2 ranks x 4 rows x 32), 3 steps.
    for (const char* name : {"data", "forward", "backward", "optimizer", "wait for gradients"})
      EXPECT_EQ(count[pid][name], 3) << pid << " " << name;
    EXPECT_GE(count[pid]["allreduce"], 3) << "the gradient buckets' collectives";
    // The compute row's phases follow one another without overlapping (1 us: the printed precision).
    auto& c = compute[pid];
    std::sort(c.begin(), c.end());
    for (size_t i = 1; i < c.size(); i++) EXPECT_LE(c[i - 1].second, c[i].first + 1) << "pid " << pid << " event " << i;
    // Buckets are launched from inside the backward (the overlap DDP is for).
    for (double t : launches[pid]) {
      bool inside = false;
      for (auto [b, e] : backward[pid]) inside |= t >= b - 1 && t <= e + 1;
      EXPECT_TRUE(inside) << "a bucket launched at " << t << " us outside every backward of rank " << pid;
    }
    EXPECT_FALSE(launches[pid].empty());
  }
}

TEST(BadInput, PortInUseAndUnreachableMaster) {
  ScratchDir out("dist_bad_port");
  // Rank 0 hosts the store: a port someone else holds is a clear error.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::listen(fd, 1);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int held = ntohs(a.sin_port);
  Proc r0(nanoddp_argv(train_flags(out.str(), -1, 2)), env_of(0, held));
  EXPECT_EQ(r0.wait_exit(60s), 1) << r0.all();
  EXPECT_NE(r0.err().find("already in use"), std::string::npos) << r0.err();
  ::close(fd);
  // Rank 1 alone: nobody serves the store.
  auto f = train_flags(out.str(), -1, 2);
  f.back() = "2";  // --timeout 2
  Proc r1(nanoddp_argv(f), env_of(1, free_port()));
  EXPECT_EQ(r1.wait_exit(60s), 1) << r1.all();
  EXPECT_NE(r1.err().find("could not reach the rendezvous store"), std::string::npos) << r1.err();
}

}  // namespace
}  // namespace nanoddp
