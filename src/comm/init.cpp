#include "comm/init.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/collective_watch.h"
#include "core/error.h"
#include "core/log.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"
#include "nanoddp/build_config.h"

#if NANODDP_HAVE_GLOO
#include "comm/gloo_group.h"
#endif
#if NANODDP_HAVE_MPI
#include "comm/mpi_group.h"
#endif
#if NANODDP_HAVE_NCCL
#include "comm/nccl_group.h"
#endif

namespace nanoddp::dist {

using std::chrono::milliseconds;

namespace {

constexpr int kDefaultMasterPort = 29500;  // torchrun's

milliseconds to_ms(double seconds) { return milliseconds(int64_t(seconds * 1000)); }

bool agent_hosts_store() {
  const char* v = std::getenv("NANODDP_AGENT_STORE");
  return v != nullptr && std::string(v) == "1";
}

// torchrun's agent serves PyTorch's TCPStore at MASTER_PORT when its workers are to share it: under
// the static backend, and under c10d since PyTorch 2.4 (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 turns
// that off). It says so with TORCHELASTIC_USE_AGENT_STORE=True, compared as PyTorch does.
bool torchrun_hosts_store() {
  const char* v = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  return v != nullptr && std::string(v) == "True";
}

// The job's store: the launcher's, or rank 0's in-process server.
std::shared_ptr<Store> connect_store(const DistEnv& env, const DistOptions& options, DistContext& ctx) {
  // Checked on every rank before any connects or binds: rank 0 would find MASTER_PORT taken by
  // torchrun's store, and the others would talk our protocol to PyTorch's.
  NANODDP_CHECK(agent_hosts_store() || !torchrun_hosts_store(),
                "torchrun serves its own store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), which nanoddp "
                "cannot join: launch with `nanoddp run` and the same flags, or run torchrun with --rdzv_backend c10d "
                "and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 so that workers get a port of their own");
  NANODDP_CHECK(!env.master_addr.empty(),
                "MASTER_ADDR is not set: launch with `nanoddp run`, or set MASTER_ADDR and MASTER_PORT (rank 0's "
                "host and a free port) on every rank");
  TcpStoreOptions client;
  client.host = env.master_addr;
  client.port = env.master_port > 0 ? env.master_port : kDefaultMasterPort;
  if (agent_hosts_store() && env.agent_store_port > 0) client.port = env.agent_store_port;
  client.connect_timeout = to_ms(options.rendezvous_timeout);
  client.timeout = to_ms(options.rendezvous_timeout);
  // A request the store answers at once (the collective watch's heartbeats and its diagnosis)
  // waits at most five heartbeat intervals, at least 5 s: when the rank hosting the store freezes,
  // the others then report within the collective timeout and a few seconds instead of the
  // client's default 120 s, deaf to SIGTERM meanwhile.
  client.request_timeout =
      std::max(milliseconds(5000), 5 * heartbeat_interval_for(to_ms(options.collective_timeout)));
  if (!agent_hosts_store() && env.rank == 0) {
    ctx.store_server = std::make_unique<TcpStoreServer>(TcpStoreServerOptions{"", client.port, store_token_from_env()});
    client.host = "127.0.0.1";  // the server listens on every interface, loopback included
  }
  return std::make_shared<TcpStore>(client);
}

// What `nanoddp run` reports about this attempt's failed worker: its launchers write the first
// failure of attempt A to "nanoddp_run/attempt<A>/failed" in the store they serve to the workers
// (launch/launcher_rendezvous.h), as JSON with the rank, pid, host and what happened, before they
// stop the other workers. A report without a rank is an interrupted launcher: its workers are
// stopping (and saving) on their own, so that is no departure (Note [known departures] in
// comm/collective_watch.h).
Departures launcher_departures(std::shared_ptr<Store> root, int attempt) {
  const std::string key = fmt::format("nanoddp_run/attempt{}/failed", attempt);
  return [root = std::move(root), key]() -> std::string {
    if (!root->check({key})) return "";
    const Bytes b = root->get(key);
    const nlohmann::json j = nlohmann::json::parse(b.begin(), b.end(), nullptr, false);
    if (!j.is_object()) return "";
    const std::string host = j.value("host", std::string("?")), what = j.value("what", std::string("failed"));
    if (j.value("node_lost", false))
      return fmt::format("the launcher of node {} ({}) {}", j.value("node", -1), host, what);
    const int rank = j.value("rank", -1);
    if (rank < 0) return "";
    return fmt::format("rank {} (pid {} on {}) {}", rank, j.value("pid", 0), host, what);
  };
}

// Every rank checks its WORLD_SIZE against rank 0's before a group connects: ranks that disagree
// would wait for peers that never come, or hand Gloo addresses of another length ("bug in
// nanoddp"). A rank with another WORLD_SIZE stops at once, naming both; rank 0 then times out
// connecting, its message pointing here too.
void agree_on_world_size(Store& store, const DistEnv& env) {
  const std::string mine = std::to_string(env.world_size);
  if (env.rank == 0) {
    store.set_string("world_size", mine);
    return;
  }
  const std::string rank0 = store.get_string("world_size");
  NANODDP_CHECK(rank0 == mine, "WORLD_SIZE is {} on rank {} but {} on rank 0: start every rank with the same "
                "WORLD_SIZE (`nanoddp run` sets it)", mine, env.rank, rank0);
}

}  // namespace

DistContext::DistContext() = default;
// Note [store linger]: the rank that hosts the store (rank 0 without a launcher) must not take it
// down while other ranks still use it: after a failed collective each rank reads the others'
// progress from the store to name the ranks that did not arrive, and one that finishes its
// diagnosis first would otherwise cut the others off mid-diagnosis. So the host serves on until
// every other rank has disconnected, at most store_linger (a few heartbeat intervals).
DistContext::~DistContext() {
  group.reset();
  store.reset();  // this rank's own connections close here, so the server counts only the others
  if (store_server) {
    const auto deadline = std::chrono::steady_clock::now() + store_linger;
    while (store_server->client_count() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  store_server.reset();
}

int local_gpu_index(const DistEnv& env, int count) {
  if (env.local_rank < count) return env.local_rank;
  // srun --gpus-per-task=1 and mpirun with a per-rank binding script give each process its own GPU
  // while the local rank still counts every process of the node: then each takes the one it sees.
  // Not with more than one visible: that is as likely a node whose every process sees all its GPUs
  // (no binding), where a modulo would put two ranks on one GPU; stop with the launcher's own way
  // to fix it. (One GPU shared by two unbound processes is NCCL's "Duplicate GPU detected".)
  const bool per_task_binding = env.launcher == Launcher::Srun || env.launcher == Launcher::Mpirun;
  if (per_task_binding && count == 1) return 0;
  switch (env.launcher) {
    case Launcher::Srun:
      NANODDP_FAIL("rank {} has SLURM_LOCALID {} of {} tasks on its node but only {} GPU(s) are visible to it: ask "
                   "srun for one GPU per task (--gpus-per-task=1), or at most {} tasks per node "
                   "(--ntasks-per-node={}), or check CUDA_VISIBLE_DEVICES",
                   env.rank, env.local_rank, env.local_world_size, count, count, count);
    case Launcher::Mpirun:
      NANODDP_FAIL("rank {} has OMPI_COMM_WORLD_LOCAL_RANK {} of {} processes on its node but only {} GPU(s) are "
                   "visible to it: start at most {} processes per node (mpirun --map-by ppr:{}:node), or give each "
                   "process its own GPU through CUDA_VISIBLE_DEVICES",
                   env.rank, env.local_rank, env.local_world_size, count, count, count);
    default:
      NANODDP_FAIL("rank {} has LOCAL_RANK {} but only {} GPU(s) are visible on this node: start at most {} "
                   "processes per node (--nproc_per_node), or check CUDA_VISIBLE_DEVICES; to share a GPU among "
                   "ranks, give every rank the same one with --device cuda:0 --backend gloo (NCCL refuses two "
                   "ranks on one GPU)",
                   env.rank, env.local_rank, count, count);
  }
}

Device local_device(const std::string& requested, const DistEnv& env) {
  // "cuda": each rank its LOCAL_RANK's GPU; "cuda:N": GPU N for every rank of the node, as in PyTorch.
  const bool per_rank = requested == "cuda";
  const Device d = per_rank ? Device::cuda(0) : parse_device(requested);
  if (!d.is_cuda()) return d;
  const int count = cuda_device_count();
  NANODDP_CHECK(count > 0, "--device {} but no GPU is visible to rank {} (check nvidia-smi and "
                "CUDA_VISIBLE_DEVICES), or use --device cpu", requested, env.rank);
  if (!per_rank) {
    NANODDP_CHECK(d.index < count, "--device {} but only {} GPU(s) are visible to rank {}: use cuda:0 to cuda:{}, "
                  "or check CUDA_VISIBLE_DEVICES", requested, count, env.rank, count - 1);
    return d;
  }
  return Device::cuda(local_gpu_index(env, count));
}

BackendKind resolve_backend(BackendKind requested, Device device, const DistEnv& env) {
  BackendKind b = requested;
  if (b == BackendKind::Auto) {
    // mpirun tells a rank nothing about where a store could live, so MPI itself connects the ranks.
    // srun names the nodes: the store runs on the first one (Gloo), which works whether or not
    // Open MPI was built with Slurm's PMI; --backend mpi still selects MPI there.
    const bool mpirun = env.launcher == Launcher::Mpirun && !env.master_from_env;
    b = device.is_cuda() ? BackendKind::Nccl : (mpirun && NANODDP_HAVE_MPI) ? BackendKind::Mpi : BackendKind::Gloo;
  }
  NANODDP_CHECK(b != BackendKind::Gloo || NANODDP_HAVE_GLOO,
                "this build has no Gloo: install libgloo-dev (scripts/setup.sh) and rebuild, or use another backend");
  NANODDP_CHECK(b != BackendKind::Mpi || NANODDP_HAVE_MPI,
                "this build has no MPI: install libopenmpi-dev (scripts/setup.sh) and rebuild, or set MASTER_ADDR "
                "and MASTER_PORT to use gloo");
  NANODDP_CHECK(b != BackendKind::Nccl || NANODDP_HAVE_NCCL,
                "this build has no NCCL: use --backend gloo (it stages CUDA tensors through host memory, slower than "
                "NCCL), or build with CUDA and NCCL");
  NANODDP_CHECK(b != BackendKind::Nccl || device.is_cuda(),
                "the nccl backend needs a CUDA device: use --device cuda, or --backend gloo");
  NANODDP_CHECK(b != BackendKind::Mpi || device.is_cpu(),
                "the mpi backend reduces CPU tensors but the device is {}: use --backend nccl, or gloo", device.str());
  return b;
}

std::unique_ptr<DistContext> init_distributed(const DistOptions& options, Device device, const DistEnv& env) {
  auto ctx = std::make_unique<DistContext>();
  ctx->env = env;
  NANODDP_CHECK(options.collective_timeout > 0 && options.rendezvous_timeout > 0, "--timeout must be a positive "
                "number of seconds (got {} for collectives and {} for the rendezvous)", options.collective_timeout,
                options.rendezvous_timeout);
  const milliseconds timeout = to_ms(options.collective_timeout);
  // Five heartbeat intervals: longer than another rank's diagnosis takes after its own timeout
  // (Note [store linger]).
  ctx->store_linger = 5 * heartbeat_interval_for(timeout);
  const std::string attempt = fmt::format("attempt{}", env.restart_count);

  // One process needs no process group, so none is set up unless --backend nccl asks for NCCL's
  // own (to measure it, or to run the NCCL path of a job on one GPU), as PyTorch would. Its store
  // is the launcher's where the launcher hosts one, else in memory: there are no peers to reach.
  const bool one_process = env.world_size == 1 && options.backend != BackendKind::Mpi;
  auto one_process_store = [&]() -> std::shared_ptr<Store> {
    if (agent_hosts_store()) return std::make_shared<PrefixStore>(attempt, connect_store(env, options, *ctx));
    return std::make_shared<HashStore>();
  };
  if (one_process && options.backend != BackendKind::Nccl) {
    ctx->backend = "single";
    ctx->store = one_process_store();
    ctx->group = make_single_rank_group(device);
    log::set_rank(0, 1);
    return ctx;
  }

  const BackendKind kind = resolve_backend(options.backend, device, env);
  ctx->backend = option_text(kind);
  if (kind == BackendKind::Mpi) {
#if NANODDP_HAVE_MPI
    MpiGroupOptions o;
    o.timeout = timeout;
    if (!env.master_addr.empty() && env.master_from_env)
      o.store = std::make_shared<PrefixStore>(attempt, connect_store(env, options, *ctx));
    auto group = std::make_unique<MpiGroup>(o);
    NANODDP_CHECK(env.launcher == Launcher::None || (group->rank() == env.rank && group->size() == env.world_size),
                  "MPI says rank {} of {} but the environment says rank {} of {}: start the job with one launcher",
                  group->rank(), group->size(), env.rank, env.world_size);
    ctx->store = group->store();
    ctx->group = std::move(group);
#endif
  } else {
    std::shared_ptr<Store> root;  // the job's whole store, when this process connected to it
    if (one_process) {
      ctx->store = one_process_store();
    } else {
      root = connect_store(env, options, *ctx);
      ctx->store = std::make_shared<PrefixStore>(attempt, root);
      ctx->store->set_timeout(to_ms(options.rendezvous_timeout));
      agree_on_world_size(*ctx->store, env);
    }
    auto group_store = std::make_shared<PrefixStore>("pg0", ctx->store);
    if (kind == BackendKind::Gloo) {
#if NANODDP_HAVE_GLOO
      GlooGroupOptions o;
      o.timeout = timeout;
      o.master_addr = env.master_addr;
      o.master_port = env.master_port > 0 ? env.master_port : kDefaultMasterPort;
      o.device = device;  // CUDA tensors are staged through host memory (Note [staging])
      if (root && agent_hosts_store()) o.departures = launcher_departures(root, env.restart_count);
      ctx->group = std::make_unique<GlooGroup>(group_store, env.rank, env.world_size, o);
#endif
    } else {
#if NANODDP_HAVE_NCCL
      NcclGroupOptions o;
      o.timeout = timeout;
      if (root && agent_hosts_store()) o.departures = launcher_departures(root, env.restart_count);
      ctx->group = std::make_unique<NcclGroup>(group_store, env.rank, env.world_size, device, o);
#endif
    }
  }
  NANODDP_ASSERT(ctx->group != nullptr, "backend {} resolved but not built", ctx->backend);
  log::set_rank(ctx->group->rank(), ctx->group->size());
  return ctx;
}

}  // namespace nanoddp::dist
