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

bool is_reducible(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::I32 || dtype == DType::I64;
}

void check_reducible(const char* collective, const char* backend, DType dtype) {
  NANODDP_CHECK(is_reducible(dtype),
                "{} of {} tensors is not supported by the {} backend (it reduces f32, f64, i32 and i64): reduce a "
                "copy in f32{}",
                collective, dtype_name(dtype), backend, dtype == DType::BF16 ? " (or use the nccl backend)" : "");
}

void check_reduce_scatter_shapes(const Tensor& out, const Tensor& in, int world_size) {
  NANODDP_CHECK(out.dtype() == in.dtype(), "reduce_scatter: output is {} but input is {}: use the same dtype",
                dtype_name(out.dtype()), dtype_name(in.dtype()));
  NANODDP_CHECK(in.numel() == out.numel() * world_size,
                "reduce_scatter: input has {} elements but must have world size ({}) x output ({}) = {}", in.numel(),
                world_size, out.numel(), out.numel() * world_size);
}

void check_all_gather_shapes(const Tensor& out, const Tensor& in, int world_size) {
  NANODDP_CHECK(out.dtype() == in.dtype(), "all_gather: output is {} but input is {}: use the same dtype",
                dtype_name(out.dtype()), dtype_name(in.dtype()));
  NANODDP_CHECK(out.numel() == in.numel() * world_size,
                "all_gather: output has {} elements but must have world size ({}) x input ({}) = {}", out.numel(),
                world_size, in.numel(), in.numel() * world_size);
}

void check_root(int root, int world_size) {
  NANODDP_CHECK(root >= 0 && root < world_size, "broadcast: root rank {} is not in [0, {})", root, world_size);
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
