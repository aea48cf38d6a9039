#include "train/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "core/allocator.h"

namespace nanoddp::train {

MemoryUse memory_use(Device device) {
  MemoryUse m;
  std::ifstream status("/proc/self/status");
  for (std::string key; status >> key;) {
    double kib = 0;
    if (key == "VmRSS:" && status >> kib) m.host_rss_mb = kib / 1024;
    else if (key == "VmHWM:" && status >> kib) m.host_peak_mb = kib / 1024;
    status.ignore(1 << 12, '\n');
  }
  if (device.is_cuda()) m.device_peak_mb = static_cast<double>(allocator_for(device).stats().peak_live_bytes) / (1 << 20);
  return m;
}

std::string format_duration(double seconds) {
  const int64_t s = std::llround(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace nanoddp::train
