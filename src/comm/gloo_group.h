// The Gloo process group: CPU tensors over Gloo's TCP transport. Built when NANODDP_HAVE_GLOO.
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
// to do; the group then refuses further collectives, since Gloo's connections are broken.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

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
};

class GlooGroup final : public ProcessGroup {
 public:
  // Connects to every other rank through `store` (give each group its own PrefixStore). Throws
  // nanoddp::Error when the peers cannot be reached within the timeout.
  GlooGroup(std::shared_ptr<Store> store, int rank, int size, GlooGroupOptions options);
  ~GlooGroup() override;

  std::string backend_name() const override { return "gloo"; }
  WorkPtr allreduce(const Tensor& t, ReduceOp op) override;
  WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override;
  WorkPtr all_gather(const Tensor& out, const Tensor& in) override;
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr barrier() override;

  // The connected Gloo context, for benchmarks that time raw Gloo calls against ours. Use it only
  // while no collective of this group is in flight.
  const std::shared_ptr<gloo::Context>& context() const;
  const GlooGroupOptions& options() const { return options_; }
  // The address this rank's Gloo device listens on.
  const std::string& address() const;

 private:
  struct State;
  WorkPtr submit(const char* name, const Tensor& t, const char* op, std::function<void(uint32_t tag)> body);

  GlooGroupOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace nanoddp::dist
