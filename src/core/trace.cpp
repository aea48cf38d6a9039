#include "core/trace.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

namespace nanoddp::trace {

namespace {

struct Event {
  const char* name;  // a string literal: every caller names its events with one
  Track track;
  char ph;  // 'X' or 'i'
  double ts, dur;
  int64_t arg;
};

std::atomic<bool> g_on{false};
std::atomic<int64_t> g_dropped{0};
std::mutex g_mu;  // the comm worker thread records too
std::vector<Event> g_events;
std::chrono::steady_clock::time_point g_origin = std::chrono::steady_clock::now();

void push(const Event& e) {
  std::lock_guard lock(g_mu);
  if (static_cast<int64_t>(g_events.size()) >= kMaxEvents) {
    g_dropped++;
    return;
  }
  g_events.push_back(e);
}

}  // namespace

void enable(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool enabled() { return g_on.load(std::memory_order_relaxed); }

void set_origin() {
  std::lock_guard lock(g_mu);
  g_origin = std::chrono::steady_clock::now();
  g_events.clear();
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - g_origin).count();
}

void record(const char* name, Track track, double start_us, double end_us, int64_t bytes) {
  if (!enabled()) return;
  push({name, track, 'X', start_us, end_us - start_us, bytes});
}

void instant(const char* name, Track track, int64_t arg) {
  if (!enabled()) return;
  push({name, track, 'i', now_us(), 0, arg});
}

Scope::Scope(const char* name, Track track, int64_t bytes) : name_(name), track_(track), bytes_(bytes) {
  if (enabled()) start_ = now_us();
}

Scope::~Scope() {
  if (start_ >= 0) record(name_, track_, start_, now_us(), bytes_);
}

std::string take_events_json(int pid) {
  std::vector<Event> events;
  {
    std::lock_guard lock(g_mu);
    events.swap(g_events);
  }
  std::string out = fmt::format(
      R"({{"name":"process_name","ph":"M","pid":{0},"tid":0,"args":{{"name":"rank {0}"}}}},)"
      R"({{"name":"process_sort_index","ph":"M","pid":{0},"tid":0,"args":{{"sort_index":{0}}}}},)"
      R"({{"name":"thread_name","ph":"M","pid":{0},"tid":{1},"args":{{"name":"compute"}}}},)"
      R"({{"name":"thread_name","ph":"M","pid":{0},"tid":{2},"args":{{"name":"communication"}}}})",
      pid, static_cast<int>(kCompute), static_cast<int>(kComm));
  for (const Event& e : events) {
    // Names are literals without quotes or backslashes, so they need no escaping.
    if (e.ph == 'X') {
      out += fmt::format(R"(,{{"name":"{}","ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f})", e.name, pid,
                         static_cast<int>(e.track), e.ts, e.dur);
      out += e.arg > 0 ? fmt::format(R"(,"args":{{"bytes":{}}}}})", e.arg) : std::string("}");
    } else {
      out += fmt::format(R"(,{{"name":"{}","ph":"i","s":"t","pid":{},"tid":{},"ts":{:.3f})", e.name, pid,
                         static_cast<int>(e.track), e.ts);
      out += e.arg >= 0 ? fmt::format(R"(,"args":{{"bucket":{}}}}})", e.arg) : std::string("}");
    }
  }
  return out;
}

int64_t dropped() { return g_dropped.load(); }

}  // namespace nanoddp::trace
