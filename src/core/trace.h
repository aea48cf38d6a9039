// --trace: a timeline of every rank's work in Chrome's trace event format (what Perfetto and
// chrome://tracing open). The layers record intervals as they run them -- the trainer its data,
// forward, backward and optimizer phases, the DDP reducer its bucket launches and the wait for
// them, the CPU process groups each collective as their worker runs it -- and the trainer gathers
// every rank's events into one file, one process per rank, on one time axis.
//
// Off by default: then a Scope costs one relaxed atomic load. Times are microseconds since
// set_origin(), which the trainer calls on every rank right after a barrier, so ranks line up to
// within the barrier's exit skew (tens of microseconds on one host; across hosts the same).
// On a GPU the intervals are the host's (launches and waits), not the kernels'.
#pragma once

#include <cstdint>
#include <string>

namespace nanoddp::trace {

// Which row of the rank's process an event belongs to.
enum Track : int { kCompute = 0, kComm = 1 };

void enable(bool on);
bool enabled();
// Time zero of this process's events (call on every rank at the same moment, after a barrier).
void set_origin();
double now_us();

// A complete event ("ph": "X") from start_us to end_us on `track`; `bytes` > 0 is shown as an arg.
void record(const char* name, Track track, double start_us, double end_us, int64_t bytes = 0);
// An instant ("ph": "i"), e.g. a bucket's collective being launched.
void instant(const char* name, Track track, int64_t arg = -1);

// Records the interval of its lifetime.
class Scope {
 public:
  Scope(const char* name, Track track = kCompute, int64_t bytes = 0);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  Track track_;
  int64_t bytes_;
  double start_ = -1;
};

// This process's events as JSON array elements (comma-separated, no brackets) with "pid": pid,
// preceded by the metadata naming the process ("rank N") and its tracks; then cleared.
std::string take_events_json(int pid);
// Events dropped because the buffer was full (kMaxEvents).
int64_t dropped();
inline constexpr int64_t kMaxEvents = 1'000'000;

}  // namespace nanoddp::trace
