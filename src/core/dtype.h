// Element types and the bf16 <-> fp32 conversions every backend agrees on.
// Included by core/tensor.h, so every layer sees it. The CPU kernels round with these functions;
// the CUDA kernels use the hardware casts, which round the same way.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace nanoddp {

enum class DType : uint8_t { F32, BF16, I32, U16, U32, U8, F64, I64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::U16: return 2;
    case DType::U32: return 4;
    case DType::U8: return 1;
    case DType::F64: return 8;
    case DType::I64: return 8;
  }
  // Unreachable for valid values; here for compilers that warn about a missing return.
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::U16: return "u16";
    case DType::U32: return "u32";
    case DType::U8: return "u8";
    case DType::F64: return "f64";
    case DType::I64: return "i64";
  }
  return "?";
}

// bf16 as stored: the top 16 bits of an IEEE fp32.
struct bf16 {
  uint16_t bits;
};

// Round to nearest even, as PyTorch's and CUDA's fp32 -> bf16 casts do; NaN stays a (quiet) NaN.
inline bf16 f32_to_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  // NaN: truncate but set the quiet bit, so a NaN whose payload is only in the low 16 bits does not
  // turn into infinity.
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  // Adding 0x7fff plus the lowest kept bit makes the truncation below round half to even.
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

inline float bf16_to_f32(bf16 x) { return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16); }

// x rounded to the nearest bf16 value, kept in fp32 (used to emulate bf16 arithmetic on the CPU).
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// The DType of a C++ element type; Tensor::data<T>() checks against it.
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<bf16>() { return DType::BF16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::U32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }

}  // namespace nanoddp
