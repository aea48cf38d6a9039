// The MPI process group, for processes started by mpirun or srun. Built when NANODDP_HAVE_MPI.
//
// Collectives run on a duplicate of MPI_COMM_WORLD, in issue order, on one worker thread
// (comm/work.h), as MPI's blocking calls (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather,
// MPI_Bcast, MPI_Barrier), and a watchdog thread enforces the timeout. We first polled MPI's
// nonblocking collectives with MPI_Test instead; measured in one run here (Open MPI 4.1.4, 2 ranks,
// f32 sum), MPI_Iallreduce is served by libnbc rather than the tuned algorithms and took 75 us
// against MPI_Allreduce's 55 us at 256 KiB and 294 us against 186 us at 1 MiB, which no polling
// can win back. The watchdog detects a timeout just as well: when a call has been running for longer
// than the timeout, it fails that work and every later one at once (wait() throws the one-line
// error naming the collective and the ranks that had not reached it, see Note [collective
// progress] in comm/collective_watch.h). MPI cannot cancel the call, so the job is over: when the
// group is destroyed after such a failure it prints that line and calls MPI_Abort, which ends every
// rank instead of hanging in MPI_Finalize. A call that a waiting caller runs itself (Note [caller
// runs] in comm/work.h) keeps that thread inside MPI, so there the watchdog prints the line and
// calls MPI_Abort at once.
//
// The progress reports need a store. Without one, rank 0 serves a TcpStore on a free port and
// tells the other ranks its address with MPI_Bcast.
#pragma once

// The C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx and warn.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>

#include "comm/process_group.h"
#include "rendezvous/store.h"

namespace nanoddp::dist {

struct MpiGroupOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::shared_ptr<Store> store;  // null: rank 0 hosts one (see above)
};

class MpiGroup final : public ProcessGroup {
 public:
  // Initialises MPI (MPI_Init_thread) unless the program already did.
  explicit MpiGroup(MpiGroupOptions options);
  ~MpiGroup() override;

  std::string backend_name() const override { return "mpi"; }

  // The group's communicator, for benchmarks that time raw MPI calls against ours. Use it only while
  // no collective of this group is in flight.
  MPI_Comm comm() const;
  // The store the group reports progress to (the one given, or the one rank 0 hosts).
  const std::shared_ptr<Store>& store() const;

 protected:
  const CollectiveSupport& support() const override;
  WorkPtr run_allreduce(const Tensor& t, Reduction r) override;
  WorkPtr run_reduce_scatter(const Tensor& out, const Tensor& in, Reduction r, bool in_place) override;
  WorkPtr run_all_gather(const Tensor& out, const Tensor& in, bool in_place) override;
  WorkPtr run_broadcast(const Tensor& t, int root) override;
  WorkPtr run_barrier() override;

 private:
  struct State;
  struct WorldInfo {
    int rank, size;
  };
  static WorldInfo init_mpi();
  MpiGroup(WorldInfo world, MpiGroupOptions options);
  // Queues a job that makes one MPI call (returning its error code), then runs `after`.
  WorkPtr submit(const char* name, const Tensor& t, const char* op, std::function<int()> call,
                 std::function<void()> after = nullptr);

  MpiGroupOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace nanoddp::dist
