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
//
// Note [known departures]: a rank that is gone need not be waited for. A collective can block on
// a dead peer for the whole timeout (or, after the transport noticed, the diagnosis's few
// intervals), while the launcher that started it already knows (it writes the failed worker's
// report into the store at once) and then stops the job's other workers within its stop timeout.
// So while a collective has made no progress for kBlockedAfter, the heartbeat thread looks every
// kPollEvery at what the store knows: the launcher's report of a failed worker (a `Departures`
// function, see comm/init.cpp), and a peer's "left" mark (written when its process group is
// destroyed, with its last collective: a rank that left before reaching ours is not coming). When
// either names a rank, the group abandons the collective (`Abandon`: the Gloo group prints one
// line naming the rank and ends this process, since the library call cannot be cancelled) instead
// of waiting. diagnose() asks the same before its own waits.
//
// A stop signal (SIGTERM, SIGINT, SIGHUP: note_stop_signal) while a collective is blocked: the peers
// got it too and normally reach the collective, so the job saves at the step's end. The watch then
// also reads the peers' heartbeats: a peer that had not reached the collective and whose beat
// stopped for two intervals is gone, and the collective is abandoned naming it. A blocked rank says
// once what it waits for.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store.h"

namespace nanoddp::dist {

// The heartbeat interval for a collective timeout: a tenth of it, between 20 ms and 2 s. The store's
// request timeout and its linger after the job (init.cpp) are counted in these intervals too.
inline std::chrono::milliseconds heartbeat_interval_for(std::chrono::milliseconds collective_timeout) {
  using std::chrono::milliseconds;
  return std::clamp(collective_timeout / 10, milliseconds(20), milliseconds(2000));
}

// Records a stop signal for the watches of this process (Note [known departures]). Safe to call
// from a signal handler.
void note_stop_signal(int sig) noexcept;

// What the job's launcher reports about a worker that failed: one sentence naming the rank ("rank 1
// (pid 4242 on node0) exited with code 7"), or "" while it reports nothing. Called off the signal
// path, from the heartbeat thread; may throw nanoddp::Error when the store is unreachable.
using Departures = std::function<std::string()>;
// Gives up collective `seq`, which cannot complete because of `why` ("rank 1 ...: see its output").
using Abandon = std::function<void(uint64_t seq, const std::string& why)>;

class CollectiveWatch {
 public:
  // `store` should be private to the process group (a PrefixStore). `departures` and `abandon`
  // may be empty (then blocked collectives wait for their timeout, as before).
  CollectiveWatch(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds collective_timeout,
                  Departures departures = {}, Abandon abandon = {});
  // Marks this rank as gone from the job ("left", with its last collective) before it stops.
  ~CollectiveWatch();
  CollectiveWatch(const CollectiveWatch&) = delete;
  CollectiveWatch& operator=(const CollectiveWatch&) = delete;

  // The program on this rank has issued collective `seq` (1-based, in issue order).
  void issued(uint64_t seq);
  // Collective `seq` has finished on this rank (successfully or not); they finish in issue order.
  void finished(uint64_t seq);

  // A known departure that keeps collective `seq` from completing: "rank 1 ...: see its output",
  // or "" when the store knows of none (Note [known departures]). read_peers = false asks only
  // the launcher, not every peer's progress.
  std::string known_departure(uint64_t seq, bool read_peers = true);

  // For collective `seq` that failed on this rank: which ranks had not reached it, or else which
  // stopped sending heartbeats, and what to do, as the tail of a one-line error ("rank 1 had not
  // reached it (...): rank 1 may have crashed or stalled; see its output"). Takes four and a half
  // heartbeat intervals.
  std::string diagnose(uint64_t seq);

  // A collective that has made no progress for this long is checked for known departures, every
  // kPollEvery.
  static constexpr std::chrono::milliseconds kBlockedAfter{300};
  static constexpr std::chrono::milliseconds kPollEvery{100};

 private:
  void heartbeat_loop();
  bool publish(bool left = false);  // false when the store is unreachable
  // The collective that has waited past kBlockedAfter, or 0.
  uint64_t blocked_collective() const;
  // Abandons the blocked collective `seq` if a departure is known, or after a stop signal a peer's
  // heartbeat stopped; says once what a signalled rank waits for.
  void check_blocked(uint64_t seq);
  std::string stopped_peers_after_signal(uint64_t seq);
  // Sleeps `d` in kPollEvery steps; returns a known departure as soon as there is one.
  std::string sleep_watching(std::chrono::milliseconds d, uint64_t seq);

  std::shared_ptr<Store> store_;
  int rank_, size_;
  std::chrono::milliseconds interval_;
  Departures departures_;
  Abandon abandon_;
  std::atomic<uint64_t> issued_{0}, finished_{0};
  std::atomic<int64_t> last_progress_ns_{0};  // steady clock of the last issue or finish
  uint64_t abandoned_ = 0;                     // heartbeat thread only
  // After a stop signal, each peer's beat as first seen and when it last changed (heartbeat thread).
  struct PeerBeat {
    uint64_t beat = 0;
    std::chrono::steady_clock::time_point since{};
    bool seen = false;
  };
  std::vector<PeerBeat> peer_beats_;
  bool told_signal_ = false;
  bool store_lost_ = false;  // the heartbeats ended for good (written before the thread ends)
  std::chrono::steady_clock::time_point last_peer_read_{};
  uint64_t beat_ = 0;  // heartbeat thread (and diagnose, under mu_)
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace nanoddp::dist
