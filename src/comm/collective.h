// Helpers the process-group backends share: describing a collective for error messages, what the
// host backends (Gloo, MPI) reduce, and the element-wise pieces they add around a library call
// (Avg = Sum, then divide by the world size, since Gloo and MPI have no average).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "comm/process_group.h"

namespace nanoddp::dist {

// "4.0 MiB", "12 B".
std::string format_bytes(size_t bytes);
const char* reduce_op_name(ReduceOp op);

// One issued collective, as errors name it: "allreduce #57 of 4.0 MiB (f32, sum)".
struct CollectiveInfo {
  const char* name = "";
  uint64_t seq = 0;  // 1-based, counted per process group in issue order
  size_t bytes = 0;
  DType dtype = DType::F32;
  const char* op = nullptr;  // reduction name, or null for data movement
  bool has_data = true;      // false for barrier
  std::string describe() const;
};

// The dtypes the element-wise reductions below (and the host backends) handle: f32, f64, i32, i64.
// bf16 and the unsigned types are refused with a clear error (reduce in f32 instead).
inline constexpr DTypeSet kHostReducible{DType::F32, DType::F64, DType::I32, DType::I64};
// The host backends' refusal of another dtype (CollectiveSupport::refuse_dtype).
std::string host_refusal(const char* collective, const char* backend, DType dtype);
// What Gloo and MPI support: host reductions, Avg by division, tensors in `place`.
CollectiveSupport host_support(TensorPlace place);

// data[i] /= divisor for n elements of `dtype` (integers: truncated toward zero, as C++ divides).
void divide_in_place(void* data, size_t n, DType dtype, int divisor);

// Calls fn.template operator()<T>() with T the C++ type of a reducible dtype.
template <typename Fn>
decltype(auto) dispatch_reducible(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32: return fn.template operator()<float>();
    case DType::F64: return fn.template operator()<double>();
    case DType::I32: return fn.template operator()<int32_t>();
    case DType::I64: return fn.template operator()<int64_t>();
    default: NANODDP_ASSERT(false, "dispatch_reducible called with {}", dtype_name(dtype));
  }
  return fn.template operator()<float>();
}

}  // namespace nanoddp::dist
