// Device side of ErrorRecord (types.cuh): the first thread to find bad input records it.
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::ops::gpu {

__device__ __forceinline__ void report_error(ErrorRecord* rec, int kind, int64_t index, int64_t value,
                                             int64_t limit) {
  if (rec == nullptr || atomicCAS(&rec->claimed, 0, 1) != 0) return;
  rec->index = index;
  rec->value = value;
  rec->limit = limit;
  __threadfence_system();  // the fields are visible to the host before the kind is
  *reinterpret_cast<volatile int*>(&rec->kind) = kind;
}

}  // namespace nanoddp::ops::gpu
