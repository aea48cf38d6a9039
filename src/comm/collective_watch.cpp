#include "comm/collective_watch.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "core/error.h"

namespace nanoddp::dist {

using std::chrono::milliseconds;

namespace {

std::string progress_key(int rank) { return "progress/" + std::to_string(rank); }

struct Progress {
  bool present = false;
  uint64_t issued = 0, beat = 0;
};

Progress parse_progress(const Bytes& value) {
  Progress p;
  const char* b = reinterpret_cast<const char*>(value.data());
  const char* e = b + value.size();
  auto [mid, ec1] = std::from_chars(b, e, p.issued);
  if (ec1 != std::errc() || mid == e) return p;
  auto [end, ec2] = std::from_chars(mid + 1, e, p.beat);
  p.present = ec2 == std::errc();
  return p;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); i++) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

CollectiveWatch::CollectiveWatch(std::shared_ptr<Store> store, int rank, int size, milliseconds collective_timeout)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      interval_(heartbeat_interval_for(collective_timeout)) {
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
}

bool CollectiveWatch::publish() {
  std::string value = fmt::format("{} {}", issued_.load(std::memory_order_relaxed), ++beat_);
  try {
    store_->set(progress_key(rank_), Bytes(value.begin(), value.end()));
    return true;
  } catch (const Error&) {
    return false;
  }
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
  for (;;) {
    stop_cv_.wait_for(lock, interval_, [&] { return stopping_; });
    if (stopping_) return;
    const auto start = std::chrono::steady_clock::now();
    if (publish()) {
      timeouts = 0;
      continue;
    }
    const bool timed_out = std::chrono::steady_clock::now() - start >= interval_;
    if (!timed_out || ++timeouts == kTimeoutsToGiveUp) return;
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
    std::this_thread::sleep_for(interval_ + interval_ / 2);  // every live rank publishes meanwhile
    read_all(first);
    // Watch every rank's beat for a few intervals: stopped = gone or frozen, advancing = alive.
    std::this_thread::sleep_for(interval_ * 3);
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
