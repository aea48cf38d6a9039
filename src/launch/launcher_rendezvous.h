// How the launchers of a job agree on who runs which ranks and on how each attempt ended, through
// the rendezvous store hosted by node 0. See Note [launcher rounds] in launcher.cpp for the protocol;
// the keys (inside the store's "nanoddp_run/" namespace) are:
//
//   attempt<A>/node<K>  node K's registration for attempt A: JSON {nnodes, nproc, host, pid}
//   attempt<A>/failed   the root cause of attempt A's failure, JSON (FailureReport); first writer wins
//   attempt<A>/done     how many nodes saw all their workers of attempt A succeed
//   attempt<A>/beat<K>  node K's heartbeat count in attempt A (K > 0; node 0 watches them)
//   left                how many nodes other than node 0 have finished (node 0 outlives them)
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace nanoddp::dist {

// One node as it registered for an attempt.
struct NodeRecord {
  int nnodes = 0;
  int nproc = 0;
  std::string host;
  int pid = 0;
  // Node 0 only: the free port its launcher found for the workers' MASTER_PORT this attempt (see
  // Note [two ports] in launcher.cpp); 0 on the other nodes.
  int worker_port = 0;
  // Settings every node must share (-1: not recorded, by an older launcher): a node with fewer
  // restarts would leave the others waiting at the next join, and node 0 counts another node lost
  // after 20 of its own monitor intervals without a heartbeat.
  int max_restarts = -1;
  int64_t monitor_interval_ms = -1;
  // For the warning about launchers that share a host's cores (0: not recorded): the threads each
  // worker runs (OMP_NUM_THREADS) and the cores of the host (online, whatever the affinity).
  int threads = 0;
  int host_cores = 0;
};

// Why an attempt failed.
struct FailureReport {
  int node = 0;
  std::string host;
  int rank = -1;  // -1 when no worker failed (the launcher was interrupted or lost)
  int local_rank = -1;
  int pid = 0;
  std::string what;                // "exited with code 3", "was killed by SIGKILL", "interrupted by SIGINT"
  std::vector<std::string> tail;   // the last lines of the failed worker's output
  bool restartable = true;         // false: stop the job even if restarts remain
  bool node_lost = false;          // node `node`'s launcher is gone (it will not leave, see leave())
  int signal = 0;                  // node `node`'s launcher was interrupted by this signal: workers save
  // "rank 1 (local 1 on host, pid 123) exited with code 3" or "the launcher on node 1 (host) ..."
  std::string headline() const;
};

// Every node of one attempt, in node-rank order. Global ranks are assigned node by node: node K's
// workers are ranks first_rank(K) .. first_rank(K) + nproc(K) - 1.
struct Membership {
  std::vector<NodeRecord> nodes;
  // Set instead of `nodes` when the attempt ended before every node joined: a node that was
  // interrupted while it stopped the previous attempt's workers reports it under this attempt, so
  // that the others stop now instead of waiting for it until --rdzv_timeout.
  std::optional<FailureReport> ended;
  // Set instead of `nodes` when `interrupted` (see join) returned a signal while this node waited.
  int interrupted = 0;
  // With `ended` or `interrupted`: how many nodes had not joined (node 0 need not wait for them
  // to leave, see LauncherRendezvous::leave).
  int absent = 0;
  int world_size() const;
  int first_rank(int node) const;
  // A warning when the workers of the nodes on `node`'s host (same host name) run more threads in
  // all than the host has cores, each launcher having sized its workers' threads as if alone; ""
  // otherwise, or when a node did not record its threads.
  std::string oversubscription_warning(int node) const;
};

class LauncherRendezvous {
 public:
  // `store` is the launchers' namespace in node 0's store.
  LauncherRendezvous(std::shared_ptr<Store> store, int node_rank, int nnodes, std::chrono::milliseconds timeout);

  // Registers this node for `attempt` and waits (up to the timeout) until every node has, or until
  // a node reports the attempt ended before it began (Membership::ended). Throws nanoddp::Error
  // when this node rank is already taken, the nodes disagree on --nnodes, or a node does not come.
  // `interrupted`, when given, is asked at every poll: a signal number it returns ends the wait
  // (Membership::interrupted).
  Membership join(int attempt, const NodeRecord& self, const std::function<int()>& interrupted = {});

  // Publishes `mine` as attempt's root cause unless another node was first; returns the one kept.
  FailureReport report_failure(int attempt, const FailureReport& mine);
  // The root cause of attempt's failure, if any node reported one.
  std::optional<FailureReport> failure(int attempt);

  // This node's workers of `attempt` all succeeded.
  void report_done(int attempt);
  bool all_done(int attempt);

  // Heartbeats: nodes other than 0 count one every monitor interval; node 0 reads every count
  // (index K for node K; index 0 unused) to notice a launcher that died or was cut off.
  void heartbeat(int attempt);
  std::vector<int64_t> heartbeats(int attempt);

  // The end of the job: nodes other than 0 say so; node 0 waits (up to `timeout`) for them, since
  // the store it hosts must outlive their last request, except for `lost` nodes known to be gone.
  void leave(std::chrono::milliseconds timeout, int lost = 0);

 private:
  std::string node_key(int attempt, int node) const;

  std::shared_ptr<Store> store_;
  int node_rank_, nnodes_;
  std::chrono::milliseconds timeout_;
};

}  // namespace nanoddp::dist
