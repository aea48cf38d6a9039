// The ProcessGroup interface: the collectives data-parallel training needs, with asynchronous work
// handles. The DDP engine and the sharded optimizers depend on this interface only, never on Gloo,
// MPI or NCCL (backends: comm/gloo_group.*, comm/mpi_group.*, comm/nccl_group.*, and
// comm/single_rank_group.cpp).
//
// Each collective is a public non-virtual call that checks its arguments once for every backend
// (devices, dtypes, sizes, the root, which buffers alias) against what the backend says it
// supports, then calls the backend's protected run_* with the arguments decided: the backends only
// move bytes (as ops/ops.cpp checks shapes once over the kernel backends).
//
// Rules every backend follows:
//  - Every rank issues the same collectives in the same order; a backend runs them in issue order.
//  - A tensor passed to a collective must stay alive and unchanged until its Work completes.
//  - Every collective has a timeout. When it expires, wait() throws nanoddp::Error naming the
//    collective, its sequence number and the ranks that had not reached it. Never a silent hang.
//  - Gloo and MPI take CPU tensors (Gloo also the CUDA tensors of its device, staged through host
//    memory); NCCL takes CUDA tensors on the group's device.
#pragma once

#include <chrono>
#include <initializer_list>
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

// A set of dtypes, one bit each.
class DTypeSet {
 public:
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType d : dtypes) bits_ |= bit(d);
  }
  static constexpr DTypeSet all() { return DTypeSet(~0u); }
  constexpr bool contains(DType d) const { return (bits_ & bit(d)) != 0; }

 private:
  constexpr explicit DTypeSet(uint32_t bits) : bits_(bits) {}
  static constexpr uint32_t bit(DType d) { return 1u << static_cast<unsigned>(d); }
  uint32_t bits_ = 0;
};

// Where a backend's collectives take their tensors.
enum class TensorPlace {
  Host,                // CPU tensors only
  GroupDevice,         // tensors on device() only
  HostOrGroupDevice,   // CPU tensors, or tensors on device() (staged through host memory)
};

// What a backend supports; the public calls check every argument against it.
struct CollectiveSupport {
  TensorPlace place = TensorPlace::Host;
  DTypeSet reduces = DTypeSet::all();   // dtypes allreduce and reduce_scatter take
  DTypeSet averages = DTypeSet::all();  // of those, the ones ReduceOp::Avg takes
  // No average of its own: Avg runs as Sum and the backend divides the result by the world size
  // (Reduction::finish).
  bool averages_by_division = false;
  // The refusal of a dtype outside `reduces` (the whole line), and of Avg outside `averages`.
  std::string (*refuse_dtype)(const char* collective, const char* backend, DType dtype) = nullptr;
  std::string (*refuse_avg)(const char* collective, const char* backend, DType dtype) = nullptr;
};

// A reduction as a backend runs it: `op` is never Avg for a backend that averages by division;
// it runs Sum and then finish(), which divides by `divide_by` (1 otherwise).
struct Reduction {
  ReduceOp op = ReduceOp::Sum;
  int divide_by = 1;
  ReduceOp requested = ReduceOp::Sum;  // what the caller asked for (errors name it)
  const char* name() const;            // "sum", "avg", "max": the requested op
  // result[i] /= divide_by for the reduced elements (a no-op when divide_by is 1).
  void finish(void* result, size_t n, DType dtype) const;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;
  // The device whose tensors the collectives take: CPU for gloo and mpi (gloo: or the CUDA device
  // it stages), the rank's GPU for nccl.
  virtual Device device() const { return Device::cpu(); }

  // t (in place) = op over ranks of t.
  WorkPtr allreduce(const Tensor& t, ReduceOp op);
  // in [size * n] -> out [n] = op over ranks of in[rank * n : (rank + 1) * n]. out may be that
  // slice of in, and overlap in nowhere else.
  WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op);
  // in [n] -> out [size * n], rank r's in at out[r * n : (r + 1) * n]. in may be this rank's slice
  // of out (in-place all_gather), and overlap out nowhere else.
  WorkPtr all_gather(const Tensor& out, const Tensor& in);
  // t (in place) = root's t.
  WorkPtr broadcast(const Tensor& t, int root);
  WorkPtr barrier();

  // Throws the group's failure, if it has one. For a caller that waited for the device rather than
  // a Work (a GPU group's wait() only orders the compute stream): a collective aborted at its
  // timeout still completes its event, with the buffer unreduced, so such a caller checks here
  // before it reads the result. Gloo and MPI fail in wait() itself: nothing to do.
  virtual void check() {}

 protected:
  virtual const CollectiveSupport& support() const = 0;
  // The backends' collectives, given checked arguments. in_place: out is exactly in's block for
  // this rank (reduce_scatter), or in is exactly this rank's block of out (all_gather).
  virtual WorkPtr run_allreduce(const Tensor& t, Reduction r) = 0;
  virtual WorkPtr run_reduce_scatter(const Tensor& out, const Tensor& in, Reduction r, bool in_place) = 0;
  virtual WorkPtr run_all_gather(const Tensor& out, const Tensor& in, bool in_place) = 0;
  virtual WorkPtr run_broadcast(const Tensor& t, int root) = 0;
  virtual WorkPtr run_barrier() = 0;

 private:
  void check_place(const Tensor& t) const;
  Reduction check_reduction(const char* collective, DType dtype, ReduceOp op) const;

  int rank_, size_;
};

// A group of one rank: every collective is the identity (or a copy) and completes at once.
std::unique_ptr<ProcessGroup> make_single_rank_group(Device device);

}  // namespace nanoddp::dist
