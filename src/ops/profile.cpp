#include "ops/profile.h"

#include <atomic>
#include <mutex>

#include "core/timer.h"

namespace nanoddp::ops {

namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
std::map<std::string, OpStats> g_stats;
}  // namespace

void set_profiling(bool on) { g_on.store(on, std::memory_order_relaxed); }

void reset_profile() {
  std::lock_guard lock(g_mu);
  g_stats.clear();
}

std::map<std::string, OpStats> profile_snapshot() {
  std::lock_guard lock(g_mu);
  return g_stats;
}

OpTimer::OpTimer(const char* name, double flops) : name_(name), flops_(flops) {
  if (g_on.load(std::memory_order_relaxed)) start_ = now_seconds();
}

OpTimer::~OpTimer() {
  if (start_ < 0) return;
  const double dt = now_seconds() - start_;
  std::lock_guard lock(g_mu);
  OpStats& s = g_stats[name_];
  s.seconds += dt;
  s.flops += flops_;
  s.calls++;
}

}  // namespace nanoddp::ops
