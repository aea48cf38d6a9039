// Opt-in timing of every op call, for benchmarks: wall time, calls and (for GEMMs) FLOPs per op
// name. Off by default; when off an op pays one relaxed atomic load. Timing is synchronous: it
// measures the CPU backend exactly, and on CUDA only the launch (use CUDA events there).
#pragma once

#include <map>
#include <string>

#include "core/device.h"

namespace nanoddp::ops {

struct OpStats {
  double seconds = 0;
  double flops = 0;
  long long calls = 0;
};

void set_profiling(bool on);
void reset_profile();
std::map<std::string, OpStats> profile_snapshot();

// FLOP/s of an f32 GEMM the size of a transformer layer's on `device` with the current thread
// count: the best of a few runs (~0.1 s on a CPU), so other load on the machine is filtered out.
double measure_matmul_flops(Device device);

// RAII timer used by ops.cpp.
class OpTimer {
 public:
  OpTimer(const char* name, double flops = 0);
  ~OpTimer();

 private:
  const char* name_;
  double flops_;
  double start_ = -1;
};

}  // namespace nanoddp::ops
