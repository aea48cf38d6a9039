// What the kernel launchers of ops/cuda exchange with the host backend (backend_cuda.cpp) besides
// pointers and sizes: the record through which kernels report bad input. Activation buffers carry
// core's DType (F32, or BF16 or F16 for mixed precision; the launchers take no other).
// Host-compilable: no device code here.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace nanoddp::cuda {

// Bad input a kernel found (an id outside its range), written by the first kernel thread that
// finds one. It lives in pinned, mapped host memory so the host reads it without a CUDA call
// (see CudaBackend::raise_kernel_error).
struct ErrorRecord {
  int kind;       // 0 none; else what was found (written last, after the fields below)
  int64_t index;  // position of the bad element
  int64_t value;  // the bad value
  int64_t limit;  // the range it had to be in: [0, limit)
};
enum ErrorKind : int { kNoError = 0, kTokenIdOutOfRange = 1, kTargetOutOfRange = 2 };

// Where kernels report: the record, and a flag in device memory that the first reporting thread
// claims with atomicCAS (atomics on mapped host memory are not atomic over PCIe). The host clears
// both after reading the record.
struct ErrorSink {
  ErrorRecord* record;  // device address of the mapped host record
  int* claim;           // device memory, 0 when unclaimed
};

}  // namespace nanoddp::cuda
