// Device side of ErrorRecord (types.cuh): the first thread to find bad input records it.
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

__device__ __forceinline__ void report_error(ErrorSink sink, int kind, int64_t index, int64_t value, int64_t limit) {
  if (sink.record == nullptr || atomicCAS(sink.claim, 0, 1) != 0) return;
  volatile ErrorRecord* rec = sink.record;
  rec->index = index;
  rec->value = value;
  rec->limit = limit;
  __threadfence_system();  // the fields reach the host before the kind does
  rec->kind = kind;
}

}  // namespace nanoddp::cuda
