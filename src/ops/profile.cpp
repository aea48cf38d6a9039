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

namespace {

// Hopper's parts by variant. The dense bf16 tensor-core figures are half the data sheets' "with
// sparsity" ones: SXM 1,979 (H100, H200, H800, GH200), NVL 1,671 (H100 NVL and H200 NVL, both
// PCIe cards at a lower clock), PCIe 1,513 (H100 and H800 PCIe, 114 multiprocessors where the
// others have 132). What tells them apart, in order: "NVL" or "PCIe" in the name; 114
// multiprocessors (only the PCIe parts); "SXM" or "HBM3" in the name (the 80 GB SXM card reports
// "NVIDIA H100 80GB HBM3"); an H200 without "NVL" (the H200 comes only as SXM and NVL, and the
// SXM part reports "NVIDIA H200"); an H100 or H800 under 88 GiB (the NVL card has 94 GB, every
// 132-multiprocessor part under it is SXM). Anything else (a 94 GB H100 whose name says neither
// SXM nor NVL) is left to --peak_flops.
PeakFlops hopper_peak(const std::string& family, const CudaDeviceInfo& gpu) {
  auto has = [&](const char* s) { return gpu.name.find(s) != std::string::npos; };
  const double gib = static_cast<double>(gpu.memory_bytes) / double(1 << 30);
  if (has("NVL")) return {835.5e12, family + " NVL dense bf16"};
  if (has("PCIe") || gpu.sm_count == 114) return {756e12, family + " PCIe dense bf16"};
  if (has("SXM") || has("HBM3") || family == "H200" || (gib > 0 && gib < 88))
    return {989e12, family + " SXM dense bf16"};
  return {0, fmt::format("{} ({:.0f} GiB, {} multiprocessors) may be the SXM part (989 TFLOP/s) or the NVL one "
                         "(835.5): give --peak_flops for MFU",
                         gpu.name, gib, gpu.sm_count)};
}

}  // namespace

PeakFlops datasheet_peak(const CudaDeviceInfo& gpu) {
  auto has = [&](const char* s) { return gpu.name.find(s) != std::string::npos; };
  // Before "H200": the Grace Hopper superchip's name holds it ("NVIDIA GH200 480GB"); SXM clocks.
  if (has("GH200")) return {989e12, "GH200 dense bf16"};
  for (const char* family : {"H100", "H200", "H800"})
    if (has(family)) return hopper_peak(family, gpu);
  // NVIDIA's datasheet figures without sparsity: what nanochat and llm.c quote MFU against.
  struct Row {
    const char* match;
    double flops;
    const char* what;
  };
  const Row table[] = {{"A100", 312e12, "A100 dense bf16"},
                       {"L40S", 362e12, "L40S dense bf16"},
                       {"4090", 165e12, "RTX 4090 dense bf16"}};
  for (const auto& r : table)
    if (has(r.match)) return {r.flops, r.what};
  return {0, fmt::format("{} is not in the peak table: give --peak_flops for MFU",
                         gpu.name.empty() ? "this GPU" : gpu.name)};
}

PeakFlops peak_flops(Device device) {
  if (device.is_cpu()) return {0, "no datasheet peak for a CPU: give --peak_flops for MFU"};
  return datasheet_peak(cuda_device_info(device.index));
}

}  // namespace nanoddp::ops
