// CUDA runtime helpers shared by core and ops/cuda. Only included by code built with CUDA.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

// Turns a failed CUDA runtime call into nanoddp::Error naming the call, file and line (ggml's
// CUDA_CHECK_GEN pattern). Kernel errors are asynchronous and surface at a later call, hence the
// CUDA_LAUNCH_BLOCKING hint in the message.
#define NANODDP_CUDA_CHECK(expr)                                                                         \
  do {                                                                                                   \
    cudaError_t err_ = (expr);                                                                           \
    if (err_ != cudaSuccess) [[unlikely]] {                                                              \
      NANODDP_FAIL("CUDA error '{}' in {} at {}:{}; check the GPU with nvidia-smi, or run with "       \
                   "CUDA_LAUNCH_BLOCKING=1 to find the failing kernel",                                  \
                   cudaGetErrorString(err_), #expr, __FILE__, __LINE__);                                 \
    }                                                                                                    \
  } while (0)

namespace nanoddp::cuda {

// The stream all compute work of this process runs on for `device` (created on first use). Using
// one non-default stream lets the communication stream order itself against it with events.
cudaStream_t compute_stream(int device);

// Makes `device` current on the calling thread.
// CUDA's current device is per thread, so every thread that touches a GPU (e.g. a communication
// worker) must set it itself.
void set_device(int device);

}  // namespace nanoddp::cuda
