// The ProcessGroup interface: the collectives data-parallel training needs, with asynchronous work
// handles. The DDP engine and the sharded optimizers depend on this interface only, never on Gloo,
// MPI or NCCL (backends: dist/gloo_group.*, dist/mpi_group.*, dist/nccl_group.*, and the
// single-rank group below).
//
// Rules every backend follows:
//  - Every rank issues the same collectives in the same order; a backend runs them in issue order.
//  - A tensor passed to a collective must stay alive and unchanged until its Work completes.
//  - Every collective has a timeout. When it expires, wait() throws nanoddp::Error naming the
//    collective, its sequence number and the ranks that had not reached it. Never a silent hang.
//  - CPU backends take CPU tensors; NCCL takes CUDA tensors on the group's device.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace nanoddp::dist {

enum class ReduceOp { Sum, Avg, Max };

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective has completed (on GPU backends: until the compute stream is
  // ordered after it, without blocking the host). Rethrows the collective's error.
  virtual void wait() = 0;
  // True once the collective has finished (successfully or not).
  virtual bool completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;
  // The device whose tensors the collectives take: CPU for gloo and mpi, the rank's GPU for nccl.
  virtual Device device() const { return Device::cpu(); }

  // t (in place) = op over ranks of t. Float and integer dtypes.
  virtual WorkPtr allreduce(const Tensor& t, ReduceOp op) = 0;
  // in [size * n] -> out [n] = op over ranks of in[rank * n : (rank + 1) * n]. out may be that
  // slice of in.
  virtual WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) = 0;
  // in [n] -> out [size * n], rank r's in at out[r * n : (r + 1) * n]. in may be this rank's slice
  // of out (in-place all_gather).
  virtual WorkPtr all_gather(const Tensor& out, const Tensor& in) = 0;
  // t (in place) = root's t.
  virtual WorkPtr broadcast(const Tensor& t, int root) = 0;
  virtual WorkPtr barrier() = 0;

  // Throws the group's failure, if it has one. For a caller that waited for the device rather than
  // a Work (a GPU group's wait() only orders the compute stream): a collective aborted at its
  // timeout still completes its event, with the buffer unreduced, so such a caller checks here
  // before it reads the result. Gloo and MPI fail in wait() itself: nothing to do.
  virtual void check() {}

 private:
  int rank_, size_;
};

// A group of one rank: every collective is the identity (or a copy) and completes at once.
std::unique_ptr<ProcessGroup> make_single_rank_group(Device device);

}  // namespace nanoddp::dist
