// sgemm on this machine: oneDNN (the BLAS nanoddp's CPU backend uses) against OpenBLAS, on the
// shapes of the depth-4 benchmark model (tokens 2048, model_dim 256, vocab 4096) and a square one.
// The best rate is the "peak" the training benchmark's MFU divides by. matmul/f32 and matmul/bf16
// time the CPU backend's ops::matmul itself on the same shapes: bf16 operands on oneDNN's matmul
// primitive (Note [bf16 matmul on the CPU]) against f32 on its sgemm -- the ratio mixed precision
// gains on this CPU (AMX, AVX512-BF16 or emulated: `nanoddp env` says which).
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build/bench/bench_gemm
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dnnl.h>

#include <vector>

#include "ops/ops.h"

namespace {

struct Shape {
  int m, n, k;
};
// (tokens x out x in) of the forward GEMMs; backward uses the same sizes transposed. Then one
// attention head's GEMM (a query tile's scores, 128 x 128 x 128: about 900 calls per bf16 step) and
// an 8 x 8 x 8 whose time is nearly all the cost of a call.
const Shape kShapes[] = {{2048, 256, 256}, {2048, 1024, 256}, {2048, 256, 1024}, {2048, 4096, 256}, {1024, 1024, 1024},
                         {128, 128, 128},  {8, 8, 8}};

template <bool kOneDnn>
void BM_sgemm(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  std::vector<float> a(size_t(s.m) * s.k, 0.5f), b(size_t(s.n) * s.k, 0.25f), c(size_t(s.m) * s.n);
  for (auto _ : state) {
    // C[m, n] = A[m, k] B[n, k]^T, the Linear layer's forward
    if constexpr (kOneDnn)
      dnnl_sgemm('N', 'T', s.m, s.n, s.k, 1.f, a.data(), s.k, b.data(), s.k, 0.f, c.data(), s.n);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.f, a.data(), s.k, b.data(), s.k, 0.f,
                  c.data(), s.n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * s.m * s.n * s.k, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k));
}

// ops::matmul(out, x, W^T) in `t`: the Linear layer's forward, bf16 writing bf16 as the model would.
void BM_matmul(benchmark::State& state, nanoddp::DType t) {
  using nanoddp::Tensor;
  const Shape s = kShapes[state.range(0)];
  Tensor a32 = Tensor::empty({s.m, s.k}, nanoddp::DType::F32), b32 = Tensor::empty({s.n, s.k}, nanoddp::DType::F32);
  nanoddp::ops::fill(a32, 0.5f);
  nanoddp::ops::fill(b32, 0.25f);
  Tensor a = a32, b = b32;
  if (t != nanoddp::DType::F32) {
    a = Tensor::empty(a32.shape(), t), b = Tensor::empty(b32.shape(), t);
    nanoddp::ops::cast(a, a32);
    nanoddp::ops::cast(b, b32);
  }
  Tensor c = Tensor::empty({s.m, s.n}, t);
  for (auto _ : state) {
    nanoddp::ops::matmul(c, a, false, b, true, 1.f, 0.f);
    benchmark::DoNotOptimize(c.raw());
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * s.m * s.n * s.k, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k));
}

BENCHMARK_CAPTURE(BM_matmul, f32, nanoddp::DType::F32)->Name("matmul/f32")->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_matmul, bf16, nanoddp::DType::BF16)->Name("matmul/bf16")->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_sgemm<true>)->Name("sgemm/onednn")->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_sgemm<false>)->Name("sgemm/openblas")->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
