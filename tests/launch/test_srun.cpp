// A real srun: a one-node Slurm 22.05 cluster on loopback (slurm_cluster.sh) runs
// `srun -N1 -n2 --cpus-per-task 1 nanoddp train ...`, and the run must equal
// `nanoddp run --standalone --nproc_per_node 2 train ...` with the same flags bit for bit: every loss
// and the final checkpoint's weights. The ranks learn who they are from what srun and slurmstepd set
// (SLURM_PROCID, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST, ...), not from variables the test
// wrote, so a mistake in reading them makes two one-rank runs that fight over one run folder.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "corpus.h"
#include "run_outputs.h"
#include "subprocess.h"
#include "test_util.h"

namespace nanoddp {
namespace {

using testing::Proc;
using testing::ScratchDir;

// `nanoddp train` flags of a tiny model: 2 ranks x 4 rows x 32 tokens, one micro-step each.
std::vector<std::string> train_flags(const std::string& data, const std::string& out) {
  std::vector<std::string> flags = {"train", "--data", data, "--out", out};
  std::istringstream rest(
      "--depth 2 --aspect_ratio 32 --head_dim 32 --max_seq_len 32 --device_batch_size 4 --total_batch_size 256 "
      "--num_iterations 6 --eval_every 3 --eval_tokens 512 --threads 1 --peak_flops 1e9 --timeout 30");
  for (std::string word; rest >> word;) flags.push_back(word);
  return flags;
}

// What the cluster needs, "" when it is all there. The script says the same when it runs; asking
// first lets a machine without Slurm skip (or fail, where references are required) with the reason.
std::string missing_requirement() {
  auto r = testing::run_command(
      "PATH=$PATH:/usr/sbin:/sbin; for t in munged slurmctld slurmd slurmstepd srun sinfo; do "
      "command -v $t >/dev/null || echo -n \"$t \"; done");
  if (!r.output.empty())
    return "Slurm is not installed (missing " + r.output +
           "): run scripts/setup.sh as root, which installs Debian's slurmctld, slurmd, slurm-client and munge";
  if (::geteuid() != 0) return "a private Slurm cluster needs root (slurmd starts tasks as their user)";
  return "";
}

// Waits for the cluster script; past `limit` it is stopped with SIGTERM, whose trap cancels the job
// and stops the daemons (SIGKILL, Proc's destructor, would leave that to its watchdog).
std::optional<int> wait_or_stop(Proc& p, std::chrono::seconds limit) {
  if (auto rc = p.wait_exit(limit)) return rc;
  ::kill(p.pid(), SIGTERM);
  p.wait_exit(std::chrono::seconds(60));
  return std::nullopt;
}

TEST(Srun, TwoTasksTrainLikeTheLauncherWithTwoWorkersBitForBit) {
  const std::string missing = missing_requirement();
  NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);
  ScratchDir data("srun_data"), launched("srun_launcher"), slurm("srun_slurm");
  testing::make_byte_dataset(data.str(), 200, 5);

  Proc ref(
      [&] {
        std::vector<std::string> argv = {testing::nanoddp_binary(), "run", "--standalone", "--nproc_per_node", "2"};
        for (auto& f : train_flags(data.str("data"), launched.str())) argv.push_back(f);
        return argv;
      }(),
      {"MASTER_ADDR", "MASTER_PORT"});
  ASSERT_EQ(ref.wait_exit(std::chrono::seconds(120)), 0) << ref.all();

  // srun passes its environment on: MASTER_PORT keeps the store off the default port, which
  // parallel tests may hold; MASTER_ADDR is removed so that the store's host comes from the step's
  // node list. --time bounds a hung step.
  std::vector<std::string> argv = {"/bin/bash",
                                   SLURM_CLUSTER_SCRIPT,
                                   "srun",
                                   "-N1",
                                   "-n2",
                                   "--cpus-per-task",
                                   "1",
                                   "--time",
                                   "4",
                                   "--kill-on-bad-exit=1",
                                   testing::nanoddp_binary()};
  for (auto& f : train_flags(data.str("data"), slurm.str())) argv.push_back(f);
  Proc job(argv, {"MASTER_ADDR", "MASTER_PORT=" + std::to_string(testing::free_port())});
  auto rc = wait_or_stop(job, std::chrono::seconds(240));
  ASSERT_TRUE(rc.has_value()) << "srun did not finish within 240 s; stopped:\n" << job.all();
  ASSERT_EQ(*rc, 0) << job.all();

  // Both ranks saw srun's layout: rank 1 of 2 on node 0, its store on the step's first host.
  EXPECT_NE(job.all().find("2 ranks x 4 rows x 32 tokens x 1 accumulation"), std::string::npos) << job.all();
  const auto want = testing::training_losses(launched.str());
  ASSERT_EQ(want.size(), 6u);
  // Bit for bit: the same two ranks compute the same sums in the same order (Note [accumulation
  // order] in model/gpt.cpp); only who started them differs.
  EXPECT_EQ(testing::training_losses(slurm.str()), want);
  EXPECT_EQ(testing::checkpoint_weights(slurm.str("checkpoints/step_000006")),
            testing::checkpoint_weights(launched.str("checkpoints/step_000006")));
}

// The batch script of `sbatch -n 2` carries SLURM_PROCID=0 and SLURM_NTASKS=2 but no step id: a
// `nanoddp train` run there directly (no srun) is one process, not rank 0 of 2. It stops at once with
// one line saying how to start the ranks. Was: rank 0 of 2 waiting for a rank 1 that nothing
// starts, until the rendezvous timeout.
TEST(Srun, ABatchScriptIsNoRank) {
  const std::string missing = missing_requirement();
  NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);
  ScratchDir data("srun_batch_data"), out("srun_batch_out");
  testing::make_byte_dataset(data.str(), 200, 5);
  std::string command = testing::nanoddp_binary();
  for (auto& f : train_flags(data.str("data"), out.str("run"))) command += " '" + f + "'";
  const std::string log = out.str("job.log");
  Proc job({"/bin/bash", SLURM_CLUSTER_SCRIPT, "sbatch", "--wait", "-n2", "--time", "4", "-o", log, "--wrap", command},
           {"MASTER_ADDR", "MASTER_PORT=" + std::to_string(testing::free_port())});
  auto rc = wait_or_stop(job, std::chrono::seconds(240));
  ASSERT_TRUE(rc.has_value()) << "sbatch did not finish within 240 s; stopped:\n" << job.all();
  const std::string text = testing::read_file(log);
  EXPECT_NE(*rc, 0) << text << job.all();
  EXPECT_NE(text.find("Slurm job's batch script (SLURM_NTASKS=2 but no SLURM_STEP_ID)"), std::string::npos)
      << text << job.all();
  EXPECT_NE(text.find("srun nanoddp"), std::string::npos) << text;
}

}  // namespace
}  // namespace nanoddp
