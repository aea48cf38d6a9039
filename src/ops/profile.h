// Opt-in timing of every op call, for benchmarks: time, calls and (for GEMMs) FLOPs per op name.
// Off by default; when off an op pays one relaxed atomic load. On the CPU an op's time is the host's
// wall time around it (the CPU backend finishes an op before returning). On a GPU it is the device
// time between two markers (CUDA events) queued on the compute stream before and after the op's
// launches: the kernels' run time, plus the device's wait for those launches where the host falls
// behind; the step's time outside every op went to what is not an op (waits for collectives, host
// synchronisations, the host's own work between ops). The Nsight Systems
// timeline is not available on the GPU machines this project is tested on, so this is the profile
// there (bench_train_gpu --breakdown). Device markers are read back in batches (a host wait every
// 16,384 ops, and in profile_snapshot): profile steps apart from the steps you time.
#pragma once

#include <map>
#include <string>

#include "core/device.h"
#include "core/gpu_info.h"

namespace nanoddp::ops {

struct OpStats {
  double seconds = 0;
  double flops = 0;
  long long calls = 0;
  OpStats& operator+=(const OpStats& o) {
    seconds += o.seconds;
    flops += o.flops;
    calls += o.calls;
    return *this;
  }
};

void set_profiling(bool on);
bool profiling();  // whether ops are being timed now
void reset_profile();
std::map<std::string, OpStats> profile_snapshot();
// The same calls, keyed by op and detail where an op gave one (matmul: its shape, transposes and
// dtypes, e.g. "matmul 2048x768x768 NT bf16->bf16"): which GEMMs the time goes to.
std::map<std::string, OpStats> profile_detail_snapshot();

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
// The table's lookup for one GPU's facts (what peak_flops reads from the device): one product
// sells as variants of one name at different clocks (H100 SXM 989 TFLOP/s, NVL 835.5, PCIe 756),
// told apart by the name, the multiprocessor count and the memory size. A GPU that none of them
// places gets flops = 0 and a `what` that says so, never a guess.
PeakFlops datasheet_peak(const CudaDeviceInfo& gpu);

// RAII timer used by ops.cpp around one op on `device`. An op that throws is not counted. `detail`
// (made only while profiling()) adds the call to profile_detail_snapshot under "name detail".
class Backend;
class OpTimer {
 public:
  OpTimer(const char* name, Device device, double flops = 0, std::string detail = {});
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* name_;
  double flops_;
  std::string detail_;
  double start_ = -1;          // host timing: the start time; -1 when not timing on the host
  Backend* backend_ = nullptr;  // device timing: the backend whose marker `marker_` opened the op
  int marker_ = -1;
  int exceptions_ = 0;          // std::uncaught_exceptions() at the start
};

}  // namespace nanoddp::ops
