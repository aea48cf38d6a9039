// matmul_fp8 on the GPU: the amax and quantize kernels against their CPU twin (ops/fp8_math.h, the
// same source, tested against a slow reference in tests/ops/test_fp8.cpp), to the byte; then
// cuBLASLt's FP8 GEMMs against the CPU's emulation for the three GEMMs of a Linear layer. The
// kernels need any GPU; the GEMMs a GPU with FP8 (compute capability 9.0+), else they skip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda_util.h"
#include "cuda_test_util.h"
#include "ops/cuda/fp8.cuh"
#include "ops/fp8_math.h"

namespace nanoddp {
namespace {

using namespace testing;

struct Quantized {
  std::vector<uint8_t> codes;
  float inv_scale;
};

// The GPU kernels on x (a host f32 tensor [rows, cols], put on the GPU as dt).
Quantized gpu_quantize(const Tensor& x, DType dt, bool transpose, bool e5m2) {
  const Tensor g = to_gpu(x, dt);
  Tensor codes = Tensor::empty({x.numel()}, DType::U8, gpu()), scalars = Tensor::empty({2}, DType::F32, gpu());
  cudaStream_t s = cuda::compute_stream(0);
  NANODDP_CUDA_CHECK(cuda::launch_fp8_amax(dt, g.raw(), g.numel(), scalars.data<float>(), s));
  NANODDP_CUDA_CHECK(cuda::launch_fp8_quantize(dt, g.raw(), x.dim(0), x.dim(1), transpose, e5m2, scalars.data<float>(),
                                               static_cast<uint8_t*>(codes.raw()), scalars.data<float>() + 1, s));
  ops::backend(gpu()).synchronize();
  const std::vector<float> sc = to_vector(scalars);
  return {bytes_of(codes), sc[1]};
}

// The same on the host, written with the twin's functions: amax over the values a dt tensor holds.
Quantized cpu_quantize(const Tensor& x, DType dt, bool transpose, bool e5m2) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  std::vector<float> v(x.numel());
  float amax = 0;
  for (int64_t i = 0; i < x.numel(); i++) {
    v[i] = round_to(dt, x.data<float>()[i]);
    amax = std::isnan(v[i]) || std::isnan(amax) ? NAN : std::max(amax, std::fabs(v[i]));
  }
  const float scale = ops::fp8::scale_from_amax(amax, e5m2);
  Quantized q{std::vector<uint8_t>(v.size()), 1.f / scale};
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      q.codes[transpose ? c * rows + r : r * cols + c] = ops::fp8::quantize(v[r * cols + c], scale, e5m2);
  return q;
}

void expect_same(const Quantized& got, const Quantized& want) {
  EXPECT_EQ(got.codes, want.codes);
  if (std::isnan(want.inv_scale))
    EXPECT_TRUE(std::isnan(got.inv_scale));
  else
    EXPECT_EQ(got.inv_scale, want.inv_scale);
}

// 48 x 80: tiles of the transposing kernel cut at both edges.
TEST(CudaFp8, QuantizeKernelsGiveTheCpuTwinsCodes) {
  NANODDP_REQUIRE_GPU();
  for (const DType dt : {DType::F32, DType::BF16})
    for (const bool transpose : {false, true})
      for (const bool e5m2 : {false, true}) {
        SCOPED_TRACE(dtype_label(dt) + (transpose ? " transposed" : "") + (e5m2 ? " e5m2" : " e4m3"));
        Tensor x = randn({48, 80}, 21, 3.f);
        x.data<float>()[5] = 1e-9f;   // below the smallest subnormal after scaling: 0
        x.data<float>()[77] = -40.f;  // the amax: exactly -max
        expect_same(gpu_quantize(x, dt, transpose, e5m2), cpu_quantize(x, dt, transpose, e5m2));
        Tensor zeros = Tensor::zeros({48, 80}, DType::F32);  // amax 0: the 1e-12 floor
        expect_same(gpu_quantize(zeros, dt, transpose, e5m2), cpu_quantize(zeros, dt, transpose, e5m2));
        x.data<float>()[100] = NAN;  // a NaN makes amax, the scale and every code NaN
        const Quantized nan = gpu_quantize(x, dt, transpose, e5m2);
        EXPECT_TRUE(std::isnan(nan.inv_scale));
        for (uint8_t c : nan.codes) ASSERT_TRUE(std::isnan(ops::fp8::decode(c, e5m2)));
      }
}

// The three GEMMs of a Linear layer y = x W^T (x [256, 128] bf16, W [384, 128] f32), as the model
// calls them, on cuBLASLt against the CPU's emulation: the same codes, multiplied in f32 in another
// order (1e-5 of the largest element), the forward with Hopper's fast accumulation, which keeps fewer
// bits in its partial sums (1e-3: its error bound is not documented; at k = 128 it stays well
// inside); a bf16 output adds its rounding.
TEST(CudaFp8, LinearLayersGemmsMatchTheCpuEmulation) {
  NANODDP_REQUIRE_GPU();
  const std::string why = ops::fp8_unsupported(gpu());
  NANODDP_SKIP_UNLESS(why.empty(), "skipped: " + why);
  const int64_t n = 256, in = 128, out = 384;
  const Tensor x = rounded(randn({n, in}, 31), DType::BF16), w = randn({out, in}, 32, 0.1f);
  const Tensor dy = rounded(randn({n, out}, 33, 1e-3f), DType::BF16);
  const Tensor gx = to_gpu(x, DType::BF16), gw = to_gpu(w, DType::F32), gdy = to_gpu(dy, DType::BF16);
  const auto cpu_bf16 = [](const Tensor& t) {
    Tensor b = Tensor::empty(t.shape(), DType::BF16);
    ops::cast(b, t);
    return b;
  };
  const Tensor cx = cpu_bf16(x), cdy = cpu_bf16(dy);
  using F = ops::Fp8Format;
  // y = x W^T: bf16 out.
  Tensor y = poisoned({n, out}, DType::BF16), y_cpu = Tensor::empty({n, out}, DType::BF16);
  ops::matmul_fp8(y, gx, false, gw, true, {F::E4M3, F::E4M3, true}, 0.f);
  ops::matmul_fp8(y_cpu, cx, false, w, true, {F::E4M3, F::E4M3, true}, 0.f);
  EXPECT_LT(max_rel_error(y, y_cpu), 1e-3 + kBf16Eps) << "forward";
  // dx = dy W: bf16 out, accumulated onto what it holds (beta 1).
  Tensor dx = to_gpu(rounded(randn({n, in}, 34), DType::BF16), DType::BF16), dx_cpu = cpu_bf16(to_host(dx));
  ops::matmul_fp8(dx, gdy, false, gw, false, {F::E5M2, F::E4M3, false}, 1.f);
  ops::matmul_fp8(dx_cpu, cdy, false, w, false, {F::E5M2, F::E4M3, false}, 1.f);
  EXPECT_LT(max_rel_error(dx, dx_cpu), 1e-5 + kBf16Eps) << "input gradient";
  // dW = dy^T x: f32 out.
  Tensor dw = poisoned({out, in}, DType::F32), dw_cpu = Tensor::empty({out, in}, DType::F32);
  ops::matmul_fp8(dw, gdy, true, gx, false, {F::E5M2, F::E4M3, false}, 0.f);
  ops::matmul_fp8(dw_cpu, cdy, true, cx, false, {F::E5M2, F::E4M3, false}, 0.f);
  EXPECT_LT(max_rel_error(dw, dw_cpu), 1e-5) << "weight gradient";
}

}  // namespace
}  // namespace nanoddp
