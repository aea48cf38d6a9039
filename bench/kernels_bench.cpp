// The CPU kernels that are not GEMMs, on the depth-4 benchmark model's sizes (2048 tokens,
// model_dim 256, hidden 1024, vocab 4096, 2 heads of 128), one thread, Gaussian inputs:
//   OMP_NUM_THREADS=1 build/bench/bench_kernels
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/rng.h"
#include "ops/backend.h"
#include "ops/ops.h"

namespace {

using namespace nanoddp;

Tensor gaussian(const Shape& shape, uint64_t seed, float std = 1.f) {
  Tensor t = Tensor::empty(shape, DType::F32);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); i++) t.data<float>()[i] = std * rng.normal();
  return t;
}

void BM_softcap_cross_entropy(benchmark::State& state) {
  const int64_t n = 2048, v = 4096;
  Tensor logits = gaussian({n, v}, 1, 3.f), work = Tensor::empty({n, v}, DType::F32);
  Tensor targets = Tensor::zeros({n}, DType::I32), losses = Tensor::empty({n}, DType::F32);
  for (auto _ : state) {
    state.PauseTiming();
    copy(work, logits);
    state.ResumeTiming();
    ops::softcap_cross_entropy(losses, work, targets, v, 15.f, 1.f / n);
  }
  state.counters["ns/logit"] = benchmark::Counter(double(n * v), benchmark::Counter::kIsIterationInvariantRate |
                                                                     benchmark::Counter::kInvert);
}

void BM_relu2_forward(benchmark::State& state) {
  Tensor x = gaussian({2048, 1024}, 2), y = Tensor::empty({2048, 1024}, DType::F32);
  for (auto _ : state) ops::relu2_forward(y, x);
  state.SetBytesProcessed(state.iterations() * x.nbytes() * 2);
}

// Arg: activations bf16 (0: f32).
void BM_rmsnorm_forward(benchmark::State& state) {
  const DType act = state.range(0) != 0 ? DType::BF16 : DType::F32;
  Tensor x = Tensor::empty({2048, 256}, act), y = Tensor::empty({2048, 256}, act),
         rstd = Tensor::empty({2048}, DType::F32);
  ops::cast(x, gaussian({2048, 256}, 3));
  for (auto _ : state) ops::rmsnorm_forward(y, rstd, x, 1.1920929e-07f);
  state.SetBytesProcessed(state.iterations() * x.nbytes() * 2);
  state.SetLabel(std::string(dtype_name(act)));
}

// Arg: activations bf16 (0: f32). dx written over dy's copy, as the QK norms run in place.
void BM_rmsnorm_backward(benchmark::State& state) {
  const DType act = state.range(0) != 0 ? DType::BF16 : DType::F32;
  Tensor x = Tensor::empty({2048, 256}, act), y = Tensor::empty({2048, 256}, act),
         dy = Tensor::empty({2048, 256}, act), dx = Tensor::empty({2048, 256}, act),
         rstd = Tensor::empty({2048}, DType::F32);
  ops::cast(x, gaussian({2048, 256}, 3));
  ops::cast(dy, gaussian({2048, 256}, 4));
  ops::rmsnorm_forward(y, rstd, x, 1.1920929e-07f);
  for (auto _ : state) ops::rmsnorm_backward(dx, dy, y, rstd, false);
  state.SetBytesProcessed(state.iterations() * x.nbytes() * 3);
  state.SetLabel(std::string(dtype_name(act)));
}

// Args: backward (0/1), activations bf16 (0: f32).
void BM_attention(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const DType act = state.range(1) != 0 ? DType::BF16 : DType::F32;
  const int64_t b = 16, t = 128, h = 2, d = 128;
  auto input = [&](uint64_t seed) {
    Tensor x = Tensor::empty({b, t, h, d}, act);
    ops::cast(x, gaussian({b, t, h, d}, seed));
    return x;
  };
  Tensor q = input(4), k = input(5), v = input(6);
  Tensor out = Tensor::empty(q.shape(), act), lse = Tensor::empty({b, h, t}, DType::F32);
  Tensor dq = Tensor::empty(q.shape(), act), dk = Tensor::empty(q.shape(), act), dv = Tensor::empty(q.shape(), act);
  const float scale = 1.f / std::sqrt(float(d));
  ops::attention_forward(out, lse, q, k, v, t, scale, 0);
  for (auto _ : state) {
    if (backward)
      ops::attention_backward(dq, dk, dv, out, q, k, v, out, lse, scale, 0);
    else
      ops::attention_forward(out, lse, q, k, v, t, scale, 0);
  }
  state.SetLabel(std::string(backward ? "backward " : "forward ") + std::string(dtype_name(act)));
}

// Sliding-window attention at nanochat's sequence length 1024 in f32, forward and backward: its
// short window there, ceil(1024 / 4 / 128) * 128 = 256 keys back, against full causal (window 0).
// Args: window.
void BM_attention_window(benchmark::State& state) {
  const int64_t window = state.range(0), b = 2, t = 1024, h = 2, d = 128;
  Tensor q = gaussian({b, t, h, d}, 4), k = gaussian({b, t, h, d}, 5), v = gaussian({b, t, h, d}, 6);
  Tensor out = Tensor::empty(q.shape(), DType::F32), lse = Tensor::empty({b, h, t}, DType::F32);
  Tensor dq = Tensor::empty(q.shape(), DType::F32), dk = Tensor::empty(q.shape(), DType::F32),
         dv = Tensor::empty(q.shape(), DType::F32);
  const float scale = 1.f / std::sqrt(float(d));
  for (auto _ : state) {
    ops::attention_forward(out, lse, q, k, v, t, scale, window);
    ops::attention_backward(dq, dk, dv, out, q, k, v, out, lse, scale, window);
  }
  state.SetLabel(window > 0 ? "forward + backward, window " + std::to_string(window) : "forward + backward, full");
}

void BM_adamw(benchmark::State& state) {
  const int64_t n = 5242880;  // every parameter of the depth-4 model
  Tensor p = gaussian({n}, 7), g = gaussian({n}, 8), m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
  int64_t step = 0;
  for (auto _ : state) ops::adamw_update(p, g, m, v, {1e-3f, 0.8f, 0.95f, 1e-10f, 0.f, ++step});
  state.SetBytesProcessed(state.iterations() * p.nbytes() * 7);
}

// Muon's Newton-Schulz (5 steps) on one of the model's matrices, bf16 or f32 (range 2), as the
// optimizer runs it; FLOP/s count the three GEMMs of each step, to set beside bench_gemm's rate.
void BM_newton_schulz(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const bool bf16 = state.range(2) != 0;
  Tensor g = gaussian({rows, cols}, 9), x = Tensor::empty({rows, cols}, DType::F32);
  for (auto _ : state) {
    state.PauseTiming();
    copy(x, g);
    state.ResumeTiming();
    ops::newton_schulz(x, 5, bf16);
  }
  const double m = double(std::min(rows, cols)), n = double(std::max(rows, cols));
  state.counters["FLOP/s"] = benchmark::Counter(5 * (4 * m * m * n + 2 * m * m * m),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(bf16 ? "bf16" : "f32");
}

BENCHMARK(BM_softcap_cross_entropy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_relu2_forward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_rmsnorm_forward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_rmsnorm_backward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention)->Args({0, 0})->Args({1, 0})->Args({0, 1})->Args({1, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_window)->Arg(0)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_adamw)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_newton_schulz)->Args({256, 256, 1})->Args({1024, 256, 1})->Args({256, 1024, 1})->Args({256, 256, 0})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
