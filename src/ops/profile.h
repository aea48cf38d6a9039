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

// The MFU denominator: the datasheet peak of one device for the arithmetic training uses, from a
// table, never a measurement (a start-up GEMM on a shared machine swung 57-330 GFLOP/s and printed
// "mfu 110%"). CUDA: the dense bf16 tensor-core peak by product name. A CPU has no such figure
// (its clock boosts above the nominal one by an amount no file tells, so a table peak can be
// exceeded): flops = 0, and MFU is reported only when the user gives --peak_flops; the achieved
// FLOP/s are reported either way.
struct PeakFlops {
  double flops = 0;
  std::string what;  // what the figure is, e.g. "H100 SXM dense bf16", or why there is none
};
PeakFlops peak_flops(Device device);

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
