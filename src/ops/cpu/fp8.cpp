// matmul_fp8 emulated on the CPU: the reference the CUDA kernels are tested against, and the path
// the model's FP8 wiring is tested on without a GPU (`--fp8` itself refuses the CPU: nothing is
// faster here). Each operand is quantized as the GPU does (Note [fp8 tensorwise scaling] in
// ops/fp8_math.h: the same bytes); the codes' values are exact in bf16 (8 exponent bits cover both
// formats' ranges, 7 mantissa bits their 3 or 2), so the bf16 matmul with f32 accumulation
// multiplies exactly those values, and alpha = (1 / scale_a) (1 / scale_b) dequantizes the sum as
// cuBLASLt's scale pointers do. Only the order of the f32 sums differs from the GPU's.
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/fp8_math.h"

namespace nanoddp::ops::cpu {

namespace {

// max |x| of x [n] as cuBLASLt's users compute it (ops/cuda/fp8.cu): the largest bits of |x|,
// which orders finite values and infinity as numbers and puts a NaN above them all.
template <typename T>
float amax_bits(const T* x, int64_t n) {
  uint32_t top = 0;
#pragma omp parallel for reduction(max : top)
  for (int64_t i = 0; i < n; i++) {
    const uint32_t b = fp8::float_bits(load(x, i)) & 0x7FFFFFFFu;
    top = b > top ? b : top;
  }
  return fp8::bits_float(top);
}

// x [rows, cols] (any float dtype) quantized whole to `format`: the codes' values in bf16, same
// shape, and 1 / scale.
template <typename T>
Tensor quantized_values(const Tensor& x, Fp8Format format, float& inv_scale) {
  const bool e5m2 = format == Fp8Format::E5M2;
  const T* p = x.data<T>();
  const int64_t n = x.numel();
  const float scale = fp8::scale_from_amax(amax_bits(p, n), e5m2);
  inv_scale = 1.f / scale;
  Tensor q = Tensor::empty(x.shape(), DType::BF16, Device::cpu());
  bf16* out = q.data<bf16>();
#pragma omp parallel for
  for (int64_t i = 0; i < n; i++) out[i] = f32_to_bf16(fp8::decode(fp8::quantize(load(p, i), scale, e5m2), e5m2));
  return q;
}

Tensor quantized_values(const Tensor& x, Fp8Format format, float& inv_scale) {
  switch (x.dtype()) {
    case DType::BF16: return quantized_values<bf16>(x, format, inv_scale);
    case DType::F16: return quantized_values<f16>(x, format, inv_scale);
    default: return quantized_values<float>(x, format, inv_scale);
  }
}

}  // namespace

void CpuBackend::matmul_fp8(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                            const Fp8Gemm& how, float beta) {
  NANODDP_ASSERT(out.dtype() == DType::F32 || out.dtype() == DType::BF16,
                 "the CPU's FP8 emulation writes f32 or bf16, not {}", dtype_name(out.dtype()));
  float inv_a = 0, inv_b = 0;
  const Tensor qa = quantized_values(a, how.a, inv_a), qb = quantized_values(b, how.b, inv_b);
  matmul(out, qa, trans_a, qb, trans_b, inv_a * inv_b, beta);
}

}  // namespace nanoddp::ops::cpu
