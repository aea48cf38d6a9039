// Helpers of the CUDA tests: moving tensors between the host and the GPU in either activation
// dtype, inputs rounded as a bf16 or f16 tensor holds them, NaN-poisoned outputs. The error measures and
// the skip macros are test_util.h's.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "ops/backend.h"
#include "ops/ops.h"
#include "test_util.h"

namespace nanoddp::testing {

inline Device gpu() { return Device::cuda(0); }

// bf16's unit roundoff: a value rounded to bf16 is within kBf16Eps / 2 of itself, relatively.
constexpr double kBf16Eps = 1.0 / 256;
// f16's (11 significant bits): the same for f16, inside its range.
constexpr double kF16Eps = 1.0 / 2048;

inline std::string dtype_label(DType t) { return t == DType::BF16 ? "bf16" : t == DType::F16 ? "f16" : "f32"; }

// A tolerance for a result of dtype dt: `f32` for f32, and for the 16-bit types a bound written
// as a count of bf16 roundings (`bf16`, a multiple of kBf16Eps), which is the same count of f16
// roundings, kF16Eps / kBf16Eps = 1/8 of it, for f16: the kernels round f16 where they round bf16.
inline double tol(DType dt, double f32, double bf16) {
  if (dt == DType::BF16) return bf16;
  return dt == DType::F16 ? bf16 * (kF16Eps / kBf16Eps) : f32;
}

// x as a dt tensor holds it.
inline float round_to(DType dt, float x) {
  if (dt == DType::BF16) return round_to_bf16(x);
  return dt == DType::F16 ? round_to_f16(x) : x;
}

// A host f32 tensor on the GPU in dtype `dt` (rounded to nearest even for bf16 and f16).
inline Tensor to_gpu(const Tensor& host, DType dt) {
  Tensor f = host.copy_to(gpu());
  if (dt == DType::F32) return f;
  Tensor b = Tensor::empty(host.shape(), dt, gpu());
  ops::cast(b, f);
  return b;
}

// f32 host copy of any float tensor.
inline Tensor to_host(const Tensor& t) {
  auto v = to_vector(t);
  Tensor h = Tensor::empty(t.shape(), DType::F32);
  std::memcpy(h.data<float>(), v.data(), v.size() * sizeof(float));
  return h;
}

// The values a `dt` tensor holds for host f32 data: the CPU reference's inputs.
inline Tensor rounded(const Tensor& host, DType dt) {
  Tensor r = Tensor::empty(host.shape(), DType::F32);
  for (int64_t i = 0; i < host.numel(); i++)
    r.data<float>()[i] = round_to(dt, host.data<float>()[i]);
  return r;
}

// A GPU tensor full of NaN: an element a kernel forgets to write fails every comparison.
inline Tensor poisoned(const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt, gpu());
  ops::fill(t, NAN);
  return t;
}

// The raw bytes of a tensor (for bitwise comparisons).
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.copy_to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(h.raw());
  return {p, p + h.nbytes()};
}

}  // namespace nanoddp::testing
