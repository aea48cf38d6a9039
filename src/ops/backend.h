// What a device backend implements: the ops of ops/ops.h (their list, NANODDP_OPS) after their
// shapes have been checked. See ops/ops.h for the meaning of each function.
#pragma once

#include <functional>
#include <string>

#include "core/device.h"
#include "ops/ops.h"

namespace nanoddp::ops {

class Backend {
 public:
  virtual ~Backend() = default;

#define NANODDP_OP_PURE_VIRTUAL(name, params) virtual void name params = 0;
  NANODDP_OPS(NANODDP_OP_PURE_VIRTUAL)
#undef NANODDP_OP_PURE_VIRTUAL

  // Blocks the host until all work queued on this backend's device has finished (a no-op on CPU).
  virtual void synchronize() = 0;

  // Empty when matmul_fp8 runs on FP8 hardware here (ops::fp8_unsupported), else the reason.
  virtual std::string fp8_unsupported() {
    return "FP8 GEMMs need an NVIDIA GPU of compute capability 9.0 (Hopper) or newer";
  }

  // Op timing on the device's own clock, for ops/profile.h, where ops run asynchronously (CUDA):
  // record_marker() queues a marker behind the work queued so far and returns its number;
  // marker_seconds(a, b) waits until marker b has passed and returns the device time from a to b;
  // reset_markers() lets the numbers be reused once every marker has been read. A backend whose
  // ops have finished when they return (the CPU) keeps these defaults: -1, and the profiler times
  // on the host.
  virtual int record_marker() { return -1; }
  virtual double marker_seconds(int /*from*/, int /*to*/) { return 0; }
  virtual void reset_markers() {}
};

// Inside a backend class: `NANODDP_OPS(NANODDP_OP_OVERRIDE)` declares every op as an override.
#define NANODDP_OP_OVERRIDE(name, params) void name params override;

// The backend for a device (CPU always; CUDA only in builds with CUDA).
Backend& backend(Device device);

// Implemented by ops/cpu and ops/cuda.
Backend& cpu_backend();
Backend& cuda_backend(int device);

// Number of CPU threads kernels use (OpenMP); 0 leaves the count as it is (OMP_NUM_THREADS or the cores,
// unless set before).
void set_cpu_threads(int n);
int cpu_threads();

// Runs fn once on each of the cpu_threads() threads the kernels run on (the caller's among them),
// for per-thread set-up such as an alternate signal stack.
void on_every_cpu_thread(const std::function<void()>& fn);

}  // namespace nanoddp::ops
