// init_distributed: from the launcher's environment (comm/environment.h) to a connected process
// group, the way torch.distributed.init_process_group does it.
//
//  - Store: with NANODDP_AGENT_STORE=1 the launcher (`nanoddp run`) already serves the store at
//    MASTER_ADDR:NANODDP_AGENT_STORE_PORT (MASTER_PORT when that is unset; Note [two ports] in
//    launch/launcher.cpp) and every rank is a client; otherwise rank 0 serves it in-process on
//    MASTER_PORT and every rank (rank 0 included) connects. Keys of each restart attempt live under
//    their own prefix, so a restarted job never reads its predecessor's keys. The MPI backend
//    without MASTER_ADDR makes its own store (comm/mpi_group.h).
//  - Backend "auto": nccl for a CUDA device; mpi when mpirun started the process and no MASTER_ADDR
//    was set; gloo otherwise (under srun the store runs on the first host of the step's node list).
//    "gloo", "mpi", "nccl" force one (an error if this build lacks it). Gloo also takes a CUDA
//    device, staging its tensors through host memory: a GPU machine without NCCL, or several ranks
//    on one GPU (--device cuda:0 on every rank), which NCCL refuses.
//  - Under torchrun's own store (TORCHELASTIC_USE_AGENT_STORE=True: static rendezvous, or c10d since
//    PyTorch 2.4) a job of several ranks stops at once: nanoddp's store protocol cannot join it.
//  - World size 1: the single-rank group and an in-memory store, no sockets (unless the launcher's
//    store is announced).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/device.h"
#include "comm/backend_kind.h"
#include "comm/environment.h"
#include "comm/process_group.h"
#include "rendezvous/store.h"

namespace nanoddp::dist {

class TcpStoreServer;

struct DistOptions {
  BackendKind backend = BackendKind::Auto;
  double collective_timeout = 300;  // seconds
  double rendezvous_timeout = 300;  // seconds to wait for the store and the other ranks at start

  template <typename V>
  void visit(V&& v) {
    v(backend, "backend", "process group: auto (nccl on GPUs, mpi under mpirun/srun, else gloo), gloo, mpi or nccl");
    v(collective_timeout, "collective_timeout",
      "seconds a collective may take before the job fails with the ranks that did not reach it");
    v(rendezvous_timeout, "rendezvous_timeout", "seconds to wait for the store and every rank at start");
  }
};

// Everything a distributed job holds on to. Destroy it to leave the job (the group goes first,
// then the store, then the server).
struct DistContext {
  DistEnv env;
  std::string backend;                           // "single", "gloo", "mpi" or "nccl"
  std::unique_ptr<TcpStoreServer> store_server;  // set on the rank hosting the store
  std::shared_ptr<Store> store;                  // this attempt's namespace of the job's store
  std::unique_ptr<ProcessGroup> group;
  // How long the rank hosting the store keeps serving, at the end, while other ranks are still
  // connected (see ~DistContext).
  std::chrono::milliseconds store_linger{0};

  DistContext();
  ~DistContext();
  int rank() const { return group->rank(); }
  int world_size() const { return group->size(); }
  bool is_primary() const { return rank() == 0; }
};

// The device this rank should compute on: "cpu"; "cuda" = the GPU of LOCAL_RANK among the visible
// ones (CUDA_VISIBLE_DEVICES is respected by the runtime, see local_gpu_index); "cuda:N" as given.
// Throws when LOCAL_RANK has no GPU.
Device local_device(const std::string& requested, const DistEnv& env);

// The index among `count` (>= 1) visible GPUs for this rank's "cuda": its local rank when below
// count; under srun or mpirun, whose tasks may each see only their own GPU (--gpus-per-task=1),
// 0 when exactly one is visible. Otherwise throws with the advice of the launcher in use.
// (Exposed for tests.)
int local_gpu_index(const DistEnv& env, int count);

// Picks the backend Auto resolves to for this device and environment (exposed for tests).
BackendKind resolve_backend(BackendKind requested, Device device, const DistEnv& env);

// Connects this process to the job. Sets log::set_rank. Throws nanoddp::Error with what to do when
// the environment is incomplete or the other ranks cannot be reached in time.
std::unique_ptr<DistContext> init_distributed(const DistOptions& options, Device device,
                                              const DistEnv& env = discover_environment());

}  // namespace nanoddp::dist
