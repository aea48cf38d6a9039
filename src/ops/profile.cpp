#include "ops/profile.h"

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

double measure_matmul_flops(Device device) {
  // 2048 x 1024 x 256: the shape of a small transformer layer's GEMM.
  const int64_t m = 2048, n = 1024, k = 256;
  Tensor a = Tensor::zeros({m, k}, DType::F32, device), b = Tensor::zeros({n, k}, DType::F32, device),
         c = Tensor::zeros({m, n}, DType::F32, device);
  fill(a, 0.5f);
  fill(b, 0.25f);
  double best = 1e30;
  for (int i = 0; i < 10; i++) {
    Stopwatch sw;
    matmul(c, a, false, b, true);
    backend(device).synchronize();
    best = std::min(best, sw.seconds());
  }
  return 2.0 * m * n * k / best;
}

}  // namespace nanoddp::ops
