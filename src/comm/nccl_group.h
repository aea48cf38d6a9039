// The NCCL process group: CUDA tensors on this rank's GPU. Built when NANODDP_HAVE_NCCL.
//
// Streams: collectives run on a communication stream of the group. Before each one, the
// communication stream waits on an event recorded on the compute stream (core/cuda_util.h), so
// it sees the gradients the compute stream produced; Work::wait() makes the compute stream wait on
// an event recorded after the collective. Neither blocks the host, so the host keeps queueing
// backward kernels while gradients are reduced (the overlap DDP needs). barrier() is the exception:
// its wait() blocks the host until every rank has arrived.
//
// Timeouts: the communicator is non-blocking (ncclConfig_t::blocking = 0). A watchdog thread polls
// the "done" event of every collective in flight; one still pending after the timeout, or an
// asynchronous NCCL error (ncclCommGetAsyncError), aborts the communicator (ncclCommAbort, which
// also releases the kernels spinning on the GPU) and marks the group failed: the next wait() or
// collective throws the one-line error naming the collective and the ranks that had not reached it
// (Note [collective progress] in comm/collective_watch.h).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <memory>

#include "comm/collective_watch.h"
#include "comm/process_group.h"
#include "rendezvous/store.h"

namespace nanoddp::dist {

struct NcclGroupOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // What the launcher reports about failed workers (Note [known departures] in
  // comm/collective_watch.h): a collective blocked on such a rank aborts the communicator, and
  // the next wait() or check() throws the line naming it. Empty without a launcher.
  Departures departures;
};

class NcclGroup final : public ProcessGroup {
 public:
  // Rank 0 creates the NCCL unique id and publishes it in `store`; every rank then joins the
  // communicator on `device` (a CUDA device of this process).
  NcclGroup(std::shared_ptr<Store> store, int rank, int size, Device device, NcclGroupOptions options);
  ~NcclGroup() override;

  std::string backend_name() const override { return "nccl"; }
  void check() override;

  Device device() const override { return device_; }
  ncclComm_t comm() const;
  cudaStream_t stream() const;

  struct State;  // public for the work handles in nccl_group.cpp

 protected:
  const CollectiveSupport& support() const override;
  WorkPtr run_allreduce(const Tensor& t, Reduction r) override;
  WorkPtr run_reduce_scatter(const Tensor& out, const Tensor& in, Reduction r, bool in_place) override;
  WorkPtr run_all_gather(const Tensor& out, const Tensor& in, bool in_place) override;
  WorkPtr run_broadcast(const Tensor& t, int root) override;
  WorkPtr run_barrier() override;

 private:
  template <typename Launch>
  WorkPtr launch(const char* name, const Tensor& t, const Tensor& other, const char* op, Launch&& body);

  Device device_;
  NcclGroupOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace nanoddp::dist
