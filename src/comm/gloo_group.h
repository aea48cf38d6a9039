// The Gloo process group: CPU tensors over Gloo's TCP transport, and the CUDA tensors of one device
// staged through page-locked host memory (Note [staging] in comm/host_staging.h). Built when
// NANODDP_HAVE_GLOO.
//
// Ranks rendezvous through our Store (wrapped as a gloo::rendezvous::Store), each listening on the
// address this host uses to reach MASTER_ADDR, so ranks on different hosts (or network namespaces)
// find each other, not just on loopback. Collectives run in issue order on one worker thread
// (comm/work.h) and use Gloo's algorithms:
//   allreduce       gloo::allreduce, ring with pipelined segments (Gloo's "ring chunked")
//   reduce_scatter  a pipelined ring of our own on Gloo's transport: Gloo's halving-doubling
//                   reduce_scatter cripples the connection for later collectives (see
//                   Note [ring reduce_scatter] in gloo_group.cpp)
//   all_gather      gloo::allgather (ring)
//   broadcast       gloo::broadcast
//   barrier         gloo::barrier
// Avg is Sum followed by a division by the world size. Reductions take f32, f64, i32, i64;
// broadcast and all_gather move any dtype.
//
// A collective that times out (or loses a peer) fails with one line naming it, its sequence number,
// the ranks that had not reached it (Note [collective progress] in comm/collective_watch.h) and what
// to do; the group then refuses further collectives, since Gloo's connections are broken. One
// blocked on a rank the store knows is gone (Note [known departures]) is abandoned at once: this
// process prints the line naming that rank and exits with status 1, since a Gloo call cannot be
// cancelled.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm/collective_watch.h"
#include "comm/process_group.h"
#include "rendezvous/store.h"

namespace gloo {
class Context;
}

namespace nanoddp::dist {

struct GlooGroupOptions {
  // Every collective fails after this long.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // The address Gloo listens on. "" = the local address of the route to master_addr:master_port.
  std::string bind_address;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The compute device: a CUDA device's tensors are staged through host memory; CPU tensors are
  // taken as they are on any device.
  Device device = Device::cpu();
  // Stage CPU tensors too, through the same buffer (tests: the staging path without a GPU).
  bool stage_host_tensors = false;
  // What the launcher reports about failed workers (Note [known departures] in
  // comm/collective_watch.h); empty without a launcher.
  Departures departures;
};

class GlooGroup final : public ProcessGroup {
 public:
  // Connects to every other rank through `store` (give each group its own PrefixStore). Throws
  // nanoddp::Error when the peers cannot be reached within the timeout.
  GlooGroup(std::shared_ptr<Store> store, int rank, int size, GlooGroupOptions options);
  ~GlooGroup() override;

  std::string backend_name() const override { return "gloo"; }
  Device device() const override { return options_.device; }

  // The connected Gloo context, for benchmarks that time raw Gloo calls against ours. Use it only
  // while no collective of this group is in flight.
  const std::shared_ptr<gloo::Context>& context() const;
  const GlooGroupOptions& options() const { return options_; }
  // The address this rank's Gloo device listens on.
  const std::string& address() const;

 protected:
  const CollectiveSupport& support() const override;
  WorkPtr run_allreduce(const Tensor& t, Reduction r) override;
  WorkPtr run_reduce_scatter(const Tensor& out, const Tensor& in, Reduction r, bool in_place) override;
  WorkPtr run_all_gather(const Tensor& out, const Tensor& in, bool in_place) override;
  WorkPtr run_broadcast(const Tensor& t, int root) override;
  WorkPtr run_barrier() override;

 private:
  struct State;
  // Tells the watch, and the list of pending collectives, that a collective has finished.
  struct Finished {
    State& st;
    uint64_t seq;
    ~Finished();
  };
  // The bytes a collective moves: `data` (read and written, or only written when `input` is
  // given) and `input` (only read), host tensors whether or not they were staged.
  using Body = std::function<void(const Tensor& data, const Tensor& input, bool in_place, uint32_t tag)>;
  // Queues the collective `name` (described by `shown`'s bytes and dtype); stages data and input
  // through host memory when they live on a device (or stage_host_tensors).
  WorkPtr submit(const char* name, const char* op, const Tensor& shown, const Tensor& data, const Tensor& input,
                 bool in_place, Body body);

  GlooGroupOptions options_;
  CollectiveSupport support_;
  std::unique_ptr<State> state_;
};

}  // namespace nanoddp::dist
