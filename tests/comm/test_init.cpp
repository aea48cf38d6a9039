// init_distributed end to end with ranks as threads (rank 0 hosting the store, or the launcher's
// store announced by NANODDP_AGENT_STORE), backend selection, the single-rank group, and the
// cross-rank consistency check.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <thread>

#include "core/error.h"
#include "comm/consistency.h"
#include "comm/init.h"
#include "core/device.h"
#include "rendezvous/tcp_store.h"
#include "nanoddp/build_config.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

using namespace std::chrono_literals;

using nanoddp::testing::free_port;

DistEnv torchrun_env(int rank, int world, int port) {
  DistEnv e;
  e.launcher = Launcher::Torchrun;
  e.rank = rank;
  e.world_size = world;
  e.local_rank = rank;
  e.local_world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  e.master_from_env = true;
  return e;
}

// Runs fn(context) on `world` ranks as threads joined through init_distributed; returns the
// errors each rank threw ("" for none).
std::vector<std::string> run_job(int world, const std::function<void(DistContext&)>& fn, int port = 0) {
  if (port == 0) port = free_port();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; r++) {
    threads.emplace_back([&, r] {
      try {
        DistOptions o;
        o.collective_timeout = 30;
        o.rendezvous_timeout = 30;
        auto ctx = init_distributed(o, Device::cpu(), torchrun_env(r, world, port));
        fn(*ctx);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(Init, NoEnvironmentIsTheSingleRankGroupWithoutSockets) {
  auto ctx = init_distributed(DistOptions{}, Device::cpu(), DistEnv{});
  EXPECT_EQ(ctx->backend, "single");
  EXPECT_EQ(ctx->world_size(), 1);
  EXPECT_EQ(ctx->store_server, nullptr);
  ctx->store->set_string("k", "v");  // an in-memory store all the same
  EXPECT_EQ(ctx->store->get_string("k"), "v");
  // Collectives over one rank: identity, or a copy when not in place.
  Tensor t = Tensor::zeros({3}, DType::F32);
  t.data<float>()[1] = 2.5f;
  ctx->group->allreduce(t, ReduceOp::Avg)->wait();
  EXPECT_EQ(t.data<float>()[1], 2.5f);
  Tensor out = Tensor::zeros({3}, DType::F32);
  ctx->group->all_gather(out, t)->wait();
  EXPECT_EQ(out.data<float>()[1], 2.5f);
  Tensor rs = Tensor::zeros({3}, DType::F32);
  ctx->group->reduce_scatter(rs, t, ReduceOp::Sum)->wait();
  EXPECT_EQ(rs.data<float>()[1], 2.5f);
  EXPECT_THROW(ctx->group->broadcast(t, 1), Error);
  check_consistent(*ctx->group, build_fingerprint());  // nothing to compare with
}

// One process asking for NCCL gets NCCL's group of one (to measure NCCL, or to run a job's NCCL
// path on one GPU), not the single-rank group; on a CPU device that is a clear error.
TEST(Init, OneProcessWithBackendNcclAsksForNccl) {
  DistOptions o;
  o.backend = BackendKind::Nccl;
  NANODDP_EXPECT_ERROR(init_distributed(o, Device::cpu(), DistEnv{}),
                       NANODDP_HAVE_NCCL ? "the nccl backend needs a CUDA device" : "this build has no NCCL");
  if (!NANODDP_HAVE_NCCL || cuda_device_count() == 0) return;  // the rest needs a GPU
  auto ctx = init_distributed(o, Device::cuda(0), DistEnv{});
  EXPECT_EQ(ctx->backend, "nccl");
  EXPECT_EQ(ctx->world_size(), 1);
}

TEST(Init, BackendSelection) {
  DistEnv torchrun = torchrun_env(0, 2, 29500);
  DistEnv mpirun;
  mpirun.launcher = Launcher::Mpirun;
  mpirun.world_size = 2;
  DistEnv srun_with_master = mpirun;
  srun_with_master.launcher = Launcher::Srun;
  srun_with_master.master_addr = "n1";
  srun_with_master.master_from_env = true;
  constexpr BackendKind kAuto = BackendKind::Auto, kGloo = BackendKind::Gloo;
  EXPECT_EQ(resolve_backend(kAuto, Device::cpu(), torchrun), kGloo);
  EXPECT_EQ(resolve_backend(kAuto, Device::cpu(), mpirun), NANODDP_HAVE_MPI ? BackendKind::Mpi : kGloo);
  EXPECT_EQ(resolve_backend(kAuto, Device::cpu(), srun_with_master), kGloo);
  DistEnv srun = srun_with_master;  // the store on the first host of the node list
  srun.master_from_env = false;
  EXPECT_EQ(resolve_backend(kAuto, Device::cpu(), srun), kGloo);
  EXPECT_THROW(resolve_backend(BackendKind::Nccl, Device::cpu(), torchrun), Error);
  // A misspelt backend never reaches resolve_backend: it is refused where the text is read.
  NANODDP_EXPECT_ERROR(parse_option<BackendKind>("smoke-signals", "--backend"),
                       "--backend must be auto, gloo, mpi or nccl (got 'smoke-signals')");
  // Gloo stages CUDA tensors through host memory; MPI takes host tensors only.
  EXPECT_EQ(resolve_backend(kGloo, Device::cuda(0), torchrun), kGloo);
  NANODDP_EXPECT_ERROR(resolve_backend(BackendKind::Mpi, Device::cuda(0), torchrun),
                       NANODDP_HAVE_MPI ? "the mpi backend reduces CPU tensors but the device is cuda:0"
                                        : "this build has no MPI");
  if (!NANODDP_HAVE_NCCL)
    NANODDP_EXPECT_ERROR(resolve_backend(kAuto, Device::cuda(0), torchrun),
                         "this build has no NCCL: use --backend gloo");
}

TEST(Init, RankZeroHostsTheStoreAndEveryRankJoins) {
  auto errors = run_job(3, [](DistContext& ctx) {
    EXPECT_EQ(ctx.backend, NANODDP_HAVE_GLOO ? "gloo" : "");
    EXPECT_EQ(ctx.store_server != nullptr, ctx.rank() == 0);
    Tensor t = Tensor::zeros({5}, DType::I64);
    for (int i = 0; i < 5; i++) t.data<int64_t>()[i] = ctx.rank() * 10 + i;
    ctx.group->allreduce(t, ReduceOp::Sum)->wait();
    for (int i = 0; i < 5; i++) EXPECT_EQ(t.data<int64_t>()[i], 30 + 3 * i);
    // Keys land in this attempt's namespace of the job's store.
    ctx.store->add("joined", 1);
    ctx.group->barrier()->wait();
    EXPECT_EQ(ctx.store->add("joined", 0), 3);
    check_consistent(*ctx.group, build_fingerprint(), "install the same nanoddp build on every node");
    ctx.group->barrier()->wait();  // rank 0's store stays up until everyone is done with it
  });
  for (auto& e : errors) EXPECT_EQ(e, "");
}

TEST(Init, TheLaunchersStoreIsUsedWhenAnnounced) {
  TcpStoreServer agent(TcpStoreServerOptions{"127.0.0.1", 0, ""});
  setenv("NANODDP_AGENT_STORE", "1", 1);
  auto errors = run_job(
      2,
      [](DistContext& ctx) {
        EXPECT_EQ(ctx.store_server, nullptr);  // no rank hosts one
        Tensor t = Tensor::zeros({1}, DType::F32);
        t.data<float>()[0] = 1.5f;
        ctx.group->allreduce(t, ReduceOp::Sum)->wait();
        EXPECT_EQ(t.data<float>()[0], 3.0f);
      },
      agent.port());
  unsetenv("NANODDP_AGENT_STORE");
  for (auto& e : errors) EXPECT_EQ(e, "");
  TcpStore look(TcpStoreOptions{"127.0.0.1", agent.port(), 2s, 2s, ""});
  EXPECT_TRUE(look.check({"attempt0/pg0/watch/progress/0", "attempt0/pg0/watch/progress/1"}));
}

// Under torchrun's own store (static rendezvous, or c10d since PyTorch 2.4) every rank stops at once
// with what to do. Was: rank 0 found MASTER_PORT taken ("already in use"), the others talked our
// protocol to PyTorch's store. A server on the port stands in for torchrun's.
TEST(Init, TorchrunsOwnStoreIsAClearErrorOnEveryRank) {
  TcpStoreServer torchruns(TcpStoreServerOptions{"127.0.0.1", 0, ""});
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  auto start = std::chrono::steady_clock::now();
  auto errors = run_job(2, [](DistContext&) {}, torchruns.port());
  for (auto& e : errors)
    EXPECT_EQ(e, "torchrun serves its own store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), which nanoddp "
                 "cannot join: launch with `nanoddp run` and the same flags, or run torchrun with --rdzv_backend c10d "
                 "and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 so that workers get a port of their own");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // One process needs no store; `nanoddp run`'s own store (announced as such) is joined as usual.
  EXPECT_EQ(init_distributed(DistOptions{}, Device::cpu(), DistEnv{})->backend, "single");
  setenv("NANODDP_AGENT_STORE", "1", 1);
  errors = run_job(2, [](DistContext& ctx) { ctx.group->barrier()->wait(); }, torchruns.port());
  unsetenv("NANODDP_AGENT_STORE");
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  for (auto& e : errors) EXPECT_EQ(e, "");
}

// srun --gpus-per-task=1 shows each task one GPU while SLURM_LOCALID counts the node's tasks.
// Was: "LOCAL_RANK 3 but only 1 GPU(s) are visible ... --nproc_per_node" on ranks 1-3.
TEST(Init, LocalGpuIndexFollowsPerTaskBindings) {
  auto env = [](Launcher launcher, int local_rank, int local_world) {
    DistEnv e;
    e.launcher = launcher;
    e.rank = 4 + local_rank;
    e.world_size = 8;
    e.local_rank = local_rank;
    e.local_world_size = local_world;
    return e;
  };
  for (Launcher l : {Launcher::Torchrun, Launcher::Srun, Launcher::Mpirun}) {
    EXPECT_EQ(local_gpu_index(env(l, 0, 4), 4), 0);
    EXPECT_EQ(local_gpu_index(env(l, 3, 4), 4), 3);  // every process sees the node's GPUs
  }
  for (Launcher l : {Launcher::Srun, Launcher::Mpirun}) {
    for (int local = 0; local < 4; local++) EXPECT_EQ(local_gpu_index(env(l, local, 4), 1), 0);  // one each
    EXPECT_THROW(local_gpu_index(env(l, 3, 4), 2), Error);  // two visible: no binding, or two each
    EXPECT_EQ(local_gpu_index(env(l, 2, 3), 1), 0);   // one each, whatever the tasks per node
  }
  // Under torchrun / nanoddp run every process sees the node's GPUs: too many processes.
  NANODDP_EXPECT_ERROR(local_gpu_index(env(Launcher::Torchrun, 3, 4), 1),
                       "rank 7 has LOCAL_RANK 3 but only 1 GPU(s) are visible on this node: start at most 1 processes "
                       "per node (--nproc_per_node)",
                       "to share a GPU among ranks, give every rank the same one with --device cuda:0 --backend gloo");
  // More processes than visible GPUs: some GPU would get two ranks. The advice is the launcher's.
  NANODDP_EXPECT_ERROR(local_gpu_index(env(Launcher::Srun, 3, 4), 3),
                       "rank 7 has SLURM_LOCALID 3 of 4 tasks on its node but only 3 GPU(s) are visible to it: ask "
                       "srun for one GPU per task (--gpus-per-task=1), or at most 3 tasks per node "
                       "(--ntasks-per-node=3)");
  NANODDP_EXPECT_ERROR(local_gpu_index(env(Launcher::Mpirun, 2, 3), 2),
                       "rank 6 has OMPI_COMM_WORLD_LOCAL_RANK 2 of 3 processes on its node but only 2 GPU(s) are "
                       "visible to it: start at most 2 processes per node (mpirun --map-by ppr:2:node)");
}

TEST(Init, MissingMasterAddressIsAClearError) {
  DistEnv e = torchrun_env(1, 2, 29500);
  e.master_addr.clear();
  NANODDP_EXPECT_ERROR(init_distributed(DistOptions{}, Device::cpu(), e), "MASTER_ADDR is not set");
}

// Consistency: every rank throws when one differs; the differing rank names the field and values.
TEST(Consistency, DifferencesStopEveryRankWithTheField) {
  auto errors = run_job(4, [](DistContext& ctx) {
    int r = ctx.rank();
    Fields same{{"--depth", "4"}, {"--lr", "0.02"}};
    check_consistent(*ctx.group, same);  // passes everywhere
    Fields f = same;
    if (r == 2) f[0].second = "6";
    if (r == 3) f.emplace_back("--extra", "x");
    if (r == 1) {
      f[0].second = "8";
      f[1].second = "0.1";
    }
    check_consistent(*ctx.group, f);
  });
  EXPECT_EQ(errors[0], "ranks 1, 2, 3 have settings that differ from rank 0's (see their error): start every rank "
                       "with the same arguments");
  EXPECT_EQ(errors[1], "--depth is 8 on rank 1 but 4 on rank 0 (and 1 more difference): start every rank with the "
                       "same arguments");
  EXPECT_EQ(errors[2], "--depth is 6 on rank 2 but 4 on rank 0: start every rank with the same arguments");
  EXPECT_EQ(errors[3], "--extra is x on rank 3 but not set on rank 0: start every rank with the same arguments");
}

TEST(Consistency, FingerprintNamesTheBuild) {
  Fields f = build_fingerprint();
  ASSERT_GE(f.size(), 4u);
  EXPECT_EQ(f[0].first, "nanoddp version");
  EXPECT_EQ(f[0].second, NANODDP_VERSION);
  EXPECT_EQ(f[1].first, "compiler");
  EXPECT_EQ(f[2].first, "build type");
}

}  // namespace
}  // namespace nanoddp::dist
