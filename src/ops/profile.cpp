#include "ops/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "core/timer.h"
#include "ops/backend.h"
#include "ops/ops.h"

namespace nanoddp::ops {

namespace {

std::atomic<bool> g_on{false};
std::mutex g_mu;  // guards everything below, and the backends' markers
std::map<std::string, OpStats> g_stats;
std::map<std::string, OpStats> g_detail;  // "name detail" of the calls that gave a detail

// A device-timed op whose markers have not been read yet.
struct Pending {
  const char* name;
  std::string detail;
  double flops;
  Backend* backend;
  int from, to;
};
std::vector<Pending> g_pending;
int g_open = 0;  // device-timed ops between their two markers: no marker may be reused meanwhile
// Pending ops are read back at once when this many have gathered: a host wait every few steps
// keeps the number of CUDA events bounded (estimated from the CPU's op counts: a depth-20 step
// queues some 1,500 ops).
constexpr size_t kSettleEvery = 16384;

// One call of op `name`: into its totals, and under "name detail" when it gave a detail.
void add(const char* name, const std::string& detail, double seconds, double flops) {
  const OpStats call{seconds, flops, 1};
  g_stats[name] += call;
  if (!detail.empty()) g_detail[fmt::format("{} {}", name, detail)] += call;
}

void drop_pending() {
  for (const Pending& p : g_pending) p.backend->reset_markers();
  g_pending.clear();
}

// Reads every pending op's device time (waiting for the device) and frees the markers for reuse.
// With g_mu held and no op open.
void settle() {
  for (const Pending& p : g_pending) add(p.name, p.detail, p.backend->marker_seconds(p.from, p.to), p.flops);
  drop_pending();
}

}  // namespace

void set_profiling(bool on) { g_on.store(on, std::memory_order_relaxed); }

bool profiling() { return g_on.load(std::memory_order_relaxed); }

void reset_profile() {
  std::lock_guard lock(g_mu);
  if (g_open == 0) drop_pending();
  g_stats.clear();
  g_detail.clear();
}

std::map<std::string, OpStats> profile_snapshot() {
  std::lock_guard lock(g_mu);
  if (g_open == 0) settle();
  return g_stats;
}

std::map<std::string, OpStats> profile_detail_snapshot() {
  std::lock_guard lock(g_mu);
  if (g_open == 0) settle();
  return g_detail;
}

OpTimer::OpTimer(const char* name, Device device, double flops, std::string detail)
    : name_(name), flops_(flops), detail_(std::move(detail)) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  exceptions_ = std::uncaught_exceptions();
  if (!device.is_cpu()) {
    Backend& b = backend(device);
    std::lock_guard lock(g_mu);
    marker_ = b.record_marker();
    if (marker_ >= 0) {
      backend_ = &b;
      g_open++;
      return;
    }
  }
  start_ = now_seconds();
}

OpTimer::~OpTimer() {
  const bool failed = std::uncaught_exceptions() > exceptions_;
  if (start_ >= 0) {
    if (failed) return;
    const double dt = now_seconds() - start_;
    std::lock_guard lock(g_mu);
    add(name_, detail_, dt, flops_);
    return;
  }
  if (backend_ == nullptr) return;
  std::lock_guard lock(g_mu);
  g_open--;
  try {
    if (!failed) g_pending.push_back({name_, detail_, flops_, backend_, marker_, backend_->record_marker()});
    if (g_open == 0 && g_pending.size() >= kSettleEvery) settle();
  } catch (const std::exception&) {
    // The device failed; the op's own error surfaces at the next op or synchronize. A destructor
    // must not throw, so the profile stops here instead.
    g_on.store(false, std::memory_order_relaxed);
    drop_pending();
  }
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
