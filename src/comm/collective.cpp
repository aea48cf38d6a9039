#include "comm/collective.h"

namespace nanoddp::dist {

std::string format_bytes(size_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (size_t(1) << 20)) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < (size_t(1) << 30)) return fmt::format("{:.1f} MiB", bytes / double(1 << 20));
  return fmt::format("{:.2f} GiB", bytes / double(1 << 30));
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

std::string CollectiveInfo::describe() const {
  if (!has_data) return fmt::format("{} #{}", name, seq);
  if (op == nullptr) return fmt::format("{} #{} of {} ({})", name, seq, format_bytes(bytes), dtype_name(dtype));
  return fmt::format("{} #{} of {} ({}, {})", name, seq, format_bytes(bytes), dtype_name(dtype), op);
}

std::string host_refusal(const char* collective, const char* backend, DType dtype) {
  return fmt::format("{} of {} tensors is not supported by the {} backend (it reduces f32, f64, i32 and i64): reduce "
                     "a copy in f32{}",
                     collective, dtype_name(dtype), backend, dtype == DType::BF16 ? " (or use the nccl backend)" : "");
}

CollectiveSupport host_support(TensorPlace place) {
  CollectiveSupport s;
  s.place = place;
  s.reduces = kHostReducible;
  s.averages = kHostReducible;
  s.averages_by_division = true;
  s.refuse_dtype = host_refusal;
  return s;
}

void divide_in_place(void* data, size_t n, DType dtype, int divisor) {
  dispatch_reducible(dtype, [&]<typename T>() {
    T* p = static_cast<T*>(data);
    if constexpr (std::is_floating_point_v<T>) {
      // Multiplying by the reciprocal would differ from a true division in the last bit; divide.
      const T d = static_cast<T>(divisor);
      for (size_t i = 0; i < n; i++) p[i] /= d;
    } else {
      for (size_t i = 0; i < n; i++) p[i] /= static_cast<T>(divisor);
    }
  });
}

}  // namespace nanoddp::dist
