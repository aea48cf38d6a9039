// Element types and the bf16/fp16 <-> fp32 conversions every backend agrees on.
// Included by core/tensor.h, so every layer sees it. The CPU kernels round with these functions;
// the CUDA kernels use the hardware casts, which round the same way.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace nanoddp {

enum class DType : uint8_t { F32, BF16, I32, U16, U32, U8, F64, I64, F16 };

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
    case DType::F16: return 2;
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
    case DType::F16: return "f16";
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

// IEEE fp16 (binary16) as stored: 1 sign, 5 exponent, 10 mantissa bits; largest finite 65504.
struct f16 {
  uint16_t bits;
};

// Round to nearest even, as PyTorch's and CUDA's fp32 -> fp16 casts do: values beyond 65504 (after
// rounding) become infinity -- the overflow that dynamic loss scaling watches for -- small values
// become subnormal or zero, NaN stays a quiet NaN. Written out rather than _Float16, which not every
// compiler that includes this header (nvcc's host pass) takes.
// Each case is computed and one chosen by selects, not early returns, so that GCC vectorises the
// loops that store f16 (and the round trips through f16 that attention's GEMM operands take).
inline f16 f32_to_f16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even;
  // a carry out of the mantissa correctly bumps the exponent.
  const uint32_t normal = (a + 0x0fffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
  // Below 2^-14: a subnormal fp16, m * 2^-24. Adding 0.5 in f32 shifts the mantissa into place and
  // rounds it to nearest even in the FPU.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  uint32_t r = a < 0x38800000u ? subnormal : normal;
  r = a >= 0x477ff000u ? 0x7c00u : r;  // rounds to >= 65520: infinity
  r = a > 0x7f800000u ? 0x7e00u : r;   // NaN: a quiet NaN
  return f16{static_cast<uint16_t>(sign | r)};
}

// Branch-free (selects, no early returns) so that GCC vectorises every kernel loop that loads f16:
// with branches it kept them scalar, and fp16 training ran at 0.59x fp32 on Zen 5.
inline float f16_to_f32(f16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t em = h.bits & 0x7fffu;  // exponent and mantissa
  // Normal: the bits shifted into place and the exponent rebiased (15 -> 127, +112 << 23); inf and
  // NaN (exponent 31) need 255, so they get the rebias twice. Mantissa (a NaN's payload) kept.
  const uint32_t normal = (em << 13) + 0x38000000u + static_cast<uint32_t>(em >= 0x7c00u) * 0x38000000u;
  // Zero or subnormal: m * 2^-24, exact in f32.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(em)) * 5.9604644775390625e-08f);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(em < 0x400u);
  return std::bit_cast<float>((subnormal & is_subnormal) | (normal & ~is_subnormal) | sign);
}

inline float round_to_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// The DType of a C++ element type; Tensor::data<T>() checks against it.
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<bf16>() { return DType::BF16; }
template <> constexpr DType dtype_of<f16>() { return DType::F16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::U32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }

}  // namespace nanoddp
