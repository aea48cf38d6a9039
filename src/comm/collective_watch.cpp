#include "comm/collective_watch.h"

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <vector>

#include "core/error.h"

namespace nanoddp::dist {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

// The last stop signal this process received (0: none).
volatile std::sig_atomic_t g_stop_signal = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::string progress_key(int rank) { return "progress/" + std::to_string(rank); }

// "<issued> <beat>", and " left" once the rank's group was destroyed.
struct Progress {
  bool present = false;
  uint64_t issued = 0, beat = 0;
  bool left = false;
};

Progress parse_progress(const Bytes& value) {
  Progress p;
  const char* b = reinterpret_cast<const char*>(value.data());
  const char* e = b + value.size();
  auto [mid, ec1] = std::from_chars(b, e, p.issued);
  if (ec1 != std::errc() || mid == e) return p;
  auto [end, ec2] = std::from_chars(mid + 1, e, p.beat);
  p.present = ec2 == std::errc();
  p.left = std::string_view(end, size_t(e - end)) == " left";
  return p;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); i++) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

void note_stop_signal(int sig) noexcept { g_stop_signal = sig; }

CollectiveWatch::CollectiveWatch(std::shared_ptr<Store> store, int rank, int size, milliseconds collective_timeout,
                                 Departures departures, Abandon abandon)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      interval_(heartbeat_interval_for(collective_timeout)),
      departures_(std::move(departures)),
      abandon_(std::move(abandon)),
      peer_beats_(size_t(size)) {
  publish();
  thread_ = std::thread([this] { heartbeat_loop(); });
}

CollectiveWatch::~CollectiveWatch() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
  // Peers blocked on this rank stop waiting (Note [known departures]); not when the heartbeats
  // found the store gone, which would only hold up this rank's exit.
  if (!store_lost_) publish(true);
}

void CollectiveWatch::issued(uint64_t seq) {
  // The first collective pending: its wait starts now (later ones wait behind it).
  if (finished_.load(std::memory_order_relaxed) + 1 == seq)
    last_progress_ns_.store(now_ns(), std::memory_order_relaxed);
  issued_.store(seq, std::memory_order_relaxed);
}

void CollectiveWatch::finished(uint64_t seq) {
  last_progress_ns_.store(now_ns(), std::memory_order_relaxed);
  finished_.store(seq, std::memory_order_relaxed);
}

bool CollectiveWatch::publish(bool left) {
  std::string value = fmt::format("{} {}{}", issued_.load(std::memory_order_relaxed), ++beat_, left ? " left" : "");
  try {
    store_->set(progress_key(rank_), Bytes(value.begin(), value.end()));
    return true;
  } catch (const Error&) {
    return false;
  }
}

uint64_t CollectiveWatch::blocked_collective() const {
  const uint64_t done = finished_.load(std::memory_order_relaxed), issued = issued_.load(std::memory_order_relaxed);
  if (issued <= done) return 0;
  const int64_t idle_ns = now_ns() - last_progress_ns_.load(std::memory_order_relaxed);
  return idle_ns >= std::chrono::nanoseconds(kBlockedAfter).count() ? done + 1 : 0;
}

std::string CollectiveWatch::known_departure(uint64_t seq, bool read_peers) {
  if (departures_) {
    std::string launcher = departures_();
    if (!launcher.empty()) return fmt::format("{}, as the launcher reports: see its output", launcher);
  }
  for (int r = 0; r < size_ && read_peers; r++) {
    if (r == rank_ || !store_->check({progress_key(r)})) continue;
    Progress p = parse_progress(store_->get(progress_key(r)));
    if (p.present && p.left && p.issued < seq)
      return fmt::format("rank {} left the job after its collective #{} without reaching it: see its output", r,
                         p.issued);
  }
  return "";
}

// The beats of peers that had not reached `seq`, watched since the stop signal: those that have not
// changed for two intervals are gone or frozen.
std::string CollectiveWatch::stopped_peers_after_signal(uint64_t seq) {
  std::vector<int> stopped;
  for (int r = 0; r < size_; r++) {
    if (r == rank_ || !store_->check({progress_key(r)})) continue;
    Progress p = parse_progress(store_->get(progress_key(r)));
    PeerBeat& b = peer_beats_[size_t(r)];
    if (!p.present || p.issued >= seq) continue;
    if (!b.seen || b.beat != p.beat) b = {p.beat, Clock::now(), true};
    if (Clock::now() - b.since >= 2 * interval_) stopped.push_back(r);
  }
  if (stopped.empty()) return "";
  bool one = stopped.size() == 1;
  return fmt::format("{} {} had not reached it and stopped sending heartbeats: {} gone or frozen; see {} output",
                     one ? "rank" : "ranks", rank_list(stopped), one ? "it is" : "they are", one ? "its" : "their");
}

void CollectiveWatch::check_blocked(uint64_t seq) {
  if (!abandon_ || seq == abandoned_) return;
  // The launcher's report is one request, read every poll; the peers' marks, one request per
  // rank, once a heartbeat interval.
  const bool read_peers = Clock::now() - last_peer_read_ >= interval_;
  if (read_peers) last_peer_read_ = Clock::now();
  std::string why = known_departure(seq, read_peers);
  const int sig = g_stop_signal;
  if (why.empty() && sig != 0) {
    if (!told_signal_) {
      told_signal_ = true;
      std::fprintf(stderr, "nanoddp: [rank %d] received signal %d while collective #%llu waits for the other ranks; "
                   "it goes on while they are alive (they got the signal too)\n", rank_, sig,
                   static_cast<unsigned long long>(seq));
      std::fflush(stderr);
    }
    why = stopped_peers_after_signal(seq);
  }
  if (why.empty()) return;
  abandoned_ = seq;
  abandon_(seq, why);
}

void CollectiveWatch::heartbeat_loop() {
  std::unique_lock lock(mu_);
  // A store that is gone stays gone (its host exited): a connection lost or refused at once ends
  // the heartbeats, rather than beats spent reconnecting (up to 30 s each, which would also hold up
  // this rank's exit, since the destructor joins this thread). A request that timed out (the
  // store's host busy, or a moment of network trouble) is tried again, up to three times in a row:
  // a healthy rank whose beat stopped would be named as frozen by the others' diagnoses.
  constexpr int kTimeoutsToGiveUp = 3;
  int timeouts = 0;
  auto next_beat = Clock::now() + interval_;
  for (;;) {
    // Between beats, a blocked collective is looked at every kPollEvery (Note [known departures]).
    const auto until = abandon_ ? std::min(next_beat, Clock::now() + kPollEvery) : next_beat;
    stop_cv_.wait_until(lock, until, [&] { return stopping_; });
    if (stopping_) return;
    if (uint64_t seq = blocked_collective(); seq != 0) {
      try {
        check_blocked(seq);
      } catch (const Error&) {
        // The store is unreachable: the beat below finds out, and the collective's own timeout holds.
      }
    }
    if (Clock::now() < next_beat) continue;
    next_beat = Clock::now() + interval_;
    const auto start = Clock::now();
    if (publish()) {
      timeouts = 0;
      continue;
    }
    const bool timed_out = Clock::now() - start >= interval_;
    if (!timed_out || ++timeouts == kTimeoutsToGiveUp) {
      store_lost_ = true;
      return;
    }
  }
}

std::string CollectiveWatch::sleep_watching(milliseconds d, uint64_t seq) {
  const auto until = Clock::now() + d;
  for (;;) {
    std::string why = known_departure(seq);
    if (!why.empty() || Clock::now() >= until) return why;
    std::this_thread::sleep_for(std::min<Clock::duration>(kPollEvery, until - Clock::now()));
  }
}

std::string CollectiveWatch::diagnose(uint64_t seq) {
  std::vector<Progress> first(size_), second(size_);
  auto read_all = [&](std::vector<Progress>& out) {
    for (int r = 0; r < size_; r++) {
      if (r == rank_ || !store_->check({progress_key(r)})) continue;
      out[r] = parse_progress(store_->get(progress_key(r)));
    }
  };
  try {
    // Every live rank publishes meanwhile; a departure the store knows of answers at once.
    if (std::string why = sleep_watching(interval_ + interval_ / 2, seq); !why.empty()) return why;
    read_all(first);
    // Watch every rank's beat for a few intervals: stopped = gone or frozen, advancing = alive.
    if (std::string why = sleep_watching(interval_ * 3, seq); !why.empty()) return why;
    read_all(second);
  } catch (const Error& e) {
    return fmt::format("could not read the other ranks' progress from the rendezvous store ({}): the process hosting "
                       "it (rank 0 or the launcher) may have exited; see the other ranks' output",
                       e.what());
  }
  auto stopped = [&](int r) { return !second[r].present || second[r].beat == first[r].beat; };
  std::vector<int> behind;
  for (int r = 0; r < size_; r++)
    if (r != rank_ && (!first[r].present || first[r].issued < seq)) behind.push_back(r);
  if (behind.empty()) {
    // Every rank had reached it. A rank can still die or freeze inside it (killed for memory,
    // crashed, SIGSTOP): its beat stops. Only when every beat advanced is the network to blame.
    std::vector<int> silent;
    for (int r = 0; r < size_; r++)
      if (r != rank_ && stopped(r)) silent.push_back(r);
    if (silent.empty())
      return "every rank had reached it, so data is not getting through between them: check the network between "
             "the nodes (interfaces, firewalls), or raise the collective timeout if they are just slow";
    bool one = silent.size() == 1;
    return fmt::format("every rank had reached it, but {} {} stopped sending heartbeats: {} died or froze in it "
                       "(killed, out of memory, crashed or stopped); see {} output and the kernel log (dmesg) of {} "
                       "node{}",
                       one ? "rank" : "ranks", rank_list(silent), one ? "it" : "they", one ? "its" : "their",
                       one ? "its" : "their", one ? "" : "s");
  }
  std::string details;
  for (int r : behind) {
    std::string state;
    if (!first[r].present)
      state = "it never reported progress";
    else if (stopped(r))
      state = fmt::format("its last collective was #{} and its heartbeat stopped: the process is gone or frozen",
                          first[r].issued);
    else
      state = fmt::format("its last collective was #{} and it is still running: it is stalled or on another code "
                          "path",
                          first[r].issued);
    details += fmt::format("{}rank {}: {}", details.empty() ? "" : "; ", r, state);
  }
  bool one = behind.size() == 1;
  return fmt::format("{} {} had not reached it ({}): {} {} may have crashed or stalled; see {} output",
                     one ? "rank" : "ranks", rank_list(behind), details, one ? "rank" : "ranks", rank_list(behind),
                     one ? "its" : "their");
}

}  // namespace nanoddp::dist
