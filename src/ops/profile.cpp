#include "ops/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/timer.h"
#include "ops/backend.h"
#include "ops/ops.h"

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

PeakFlops peak_flops(Device device) {
  if (device.is_cpu()) return {0, "no datasheet peak for a CPU: give --peak_flops for MFU"};
  // NVIDIA's datasheet figures without sparsity: what nanochat and llm.c quote MFU against.
  struct Row {
    const char* match;
    double flops;
    const char* what;
  };
  const Row table[] = {{"H100 PCIe", 756e12, "H100 PCIe dense bf16"}, {"H100", 989e12, "H100 SXM dense bf16"},
                       {"H200", 989e12, "H200 dense bf16"},          {"H800", 989e12, "H800 dense bf16"},
                       {"A100", 312e12, "A100 dense bf16"},          {"L40S", 362e12, "L40S dense bf16"},
                       {"4090", 165e12, "RTX 4090 dense bf16"}};
  const std::string name = cuda_device_name(device.index);
  for (const auto& r : table)
    if (name.find(r.match) != std::string::npos) return {r.flops, r.what};
  return {0, fmt::format("{} is not in the peak table: give --peak_flops for MFU", name.empty() ? "this GPU" : name)};
}

}  // namespace nanoddp::ops
