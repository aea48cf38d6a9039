// Note [collective progress]: when a collective times out, the rank that waited can only see that
// data did not arrive. To say *which* rank is missing, every rank publishes its progress to the
// rendezvous store: a heartbeat thread writes "progress/<rank>" = "<last issued seq> <beat>" every
// heartbeat interval (a small fraction of the collective timeout, at most 2 s). Issuing a collective
// only stores an atomic counter: publishing on every collective cost a store round trip and two
// thread wake-ups per collective, which measured as +30 us per small allreduce on 2 cores.
//
// On a failure, diagnose(seq) waits one and a half intervals (every live rank publishes meanwhile),
// then reads every rank's entry: ranks whose last issued collective is below seq had not reached
// it. It then watches every beat for a few intervals more: a beat that stops means the process is
// gone or frozen; a beat that advances means it is alive but stalled (busy, blocked, or on a
// different code path). If every rank had reached the collective, the ranks whose beat stopped
// died or froze inside it (killed for memory, crashed, SIGSTOP); only when every beat advanced is
// the fault in the network.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous/store.h"

namespace nanoddp::dist {

// The heartbeat interval for a collective timeout: a tenth of it, between 20 ms and 2 s. The store's
// request timeout and its linger after the job (init.cpp) are counted in these intervals too.
inline std::chrono::milliseconds heartbeat_interval_for(std::chrono::milliseconds collective_timeout) {
  using std::chrono::milliseconds;
  return std::clamp(collective_timeout / 10, milliseconds(20), milliseconds(2000));
}

class CollectiveWatch {
 public:
  // `store` should be private to the process group (a PrefixStore).
  CollectiveWatch(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds collective_timeout);
  ~CollectiveWatch();
  CollectiveWatch(const CollectiveWatch&) = delete;
  CollectiveWatch& operator=(const CollectiveWatch&) = delete;

  // The program on this rank has issued collective `seq` (1-based, in issue order).
  void issued(uint64_t seq) { issued_.store(seq, std::memory_order_relaxed); }

  // For collective `seq` that failed on this rank: which ranks had not reached it, or else which
  // stopped sending heartbeats, and what to do, as the tail of a one-line error ("rank 1 had not
  // reached it (...): rank 1 may have crashed or stalled; see its output"). Takes four and a half
  // heartbeat intervals.
  std::string diagnose(uint64_t seq);

  std::chrono::milliseconds heartbeat_interval() const { return interval_; }

 private:
  void heartbeat_loop();
  bool publish();  // false when the store is unreachable

  std::shared_ptr<Store> store_;
  int rank_, size_;
  std::chrono::milliseconds interval_;
  std::atomic<uint64_t> issued_{0};
  uint64_t beat_ = 0;  // heartbeat thread (and diagnose, under mu_)
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace nanoddp::dist
