// Causal attention on one GPU, forward and backward apart: nanoddp's attention on a depth-20
// step's shapes (batch 16, seq 2048, 10 heads of 128 by default), in bf16, with the rates they
// reach, through the route NANODDP_CUDA_ATTENTION picks (ops/cuda/cudnn_attention.h: cuDNN's fused
// attention, our flash kernels, ...), named in the output. scripts/gpu_check.sh runs it once per
// route; bench/torch_attention_bench.py times PyTorch's FlashAttention-2 and cuDNN attention on the
// same shapes, so one call shows the gap kernel by kernel. Prints one JSON line.
// Rates use the nominal FLOPs of causal attention: forward 2 B H T^2 D (half of Q K^T and P V),
// backward 2.5x that (five products instead of two); our flash backward recomputes S and dP in its
// dq kernel (Note [deterministic attention backward] in ops/cuda/attention_flash.cu), so its own
// arithmetic is 3.5x the forward's. With --window w (a sliding window, ops.h) the count is of the
// query-key pairs in the band instead: T (w + 1) - w (w + 1) / 2 for T^2 / 2.
//   NANODDP_CUDA_ATTENTION=flash build/bench/bench_attention_gpu [--batch 16 --seq 2048 --heads 10
//       --kv_heads 10 --head_dim 128 --window 0]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/allocator.h"
#include "core/rng.h"
#include "core/timer.h"
#include "ops/backend.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/ops.h"

namespace {

using namespace nanoddp;

struct Args {
  int batch = 16, seq = 2048, heads = 10, kv_heads = 10, head_dim = 128, reps = 20, warmup = 3, window = 0;
};

// Normal values (not zeros: METHOD.md), cast to bf16 on the GPU.
Tensor random_bf16(const Shape& shape, uint64_t seed, Device dev) {
  Tensor h = Tensor::empty(shape, DType::F32);
  Rng rng(seed);
  for (int64_t i = 0; i < h.numel(); i++) h.data<float>()[i] = rng.normal();
  Tensor out = Tensor::empty(shape, DType::BF16, dev);
  ops::cast(out, h.copy_to(dev));
  return out;
}

// Median seconds of one call of fn over `reps` timed calls, each synchronised on both sides.
template <typename Fn>
double median_seconds(ops::Backend& be, int warmup, int reps, Fn fn) {
  for (int i = 0; i < warmup; i++) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; i++) {
    be.synchronize();
    Stopwatch sw;
    fn();
    be.synchronize();
    t.push_back(sw.seconds());
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[reps / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"nanoddp causal attention forward and backward on one GPU (bf16), one JSON line"};
  app.add_option("--batch", a.batch)->check(CLI::PositiveNumber);
  app.add_option("--seq", a.seq)->check(CLI::PositiveNumber);
  app.add_option("--heads", a.heads)->check(CLI::PositiveNumber);
  app.add_option("--kv_heads", a.kv_heads, "Key/value heads (grouped-query when fewer than --heads)")
      ->check(CLI::PositiveNumber);
  app.add_option("--head_dim", a.head_dim)->check(CLI::PositiveNumber);
  app.add_option("--reps", a.reps, "Timed calls of each (the median is reported)")->check(CLI::Range(1, 10000));
  app.add_option("--warmup", a.warmup, "Untimed calls first")->check(CLI::Range(0, 1000));
  app.add_option("--window", a.window, "Sliding window: keys before each query it sees (0: full causal)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    NANODDP_CHECK(cuda_device_count() > 0, "no GPU visible: this benchmark needs one");
    NANODDP_CHECK(a.heads % a.kv_heads == 0, "--heads {} is not a multiple of --kv_heads {}", a.heads, a.kv_heads);
    const Device dev = Device::cuda(0);
    ops::Backend& be = ops::backend(dev);
    const int64_t b = a.batch, t = a.seq, h = a.heads, hk = a.kv_heads, d = a.head_dim;
    Tensor q = random_bf16({b, t, h, d}, 1, dev), k = random_bf16({b, t, hk, d}, 2, dev),
           v = random_bf16({b, t, hk, d}, 3, dev), dout = random_bf16({b, t, h, d}, 4, dev);
    Tensor out = Tensor::empty({b, t, h, d}, DType::BF16, dev), lse = Tensor::empty({b, h, t}, DType::F32, dev);
    Tensor dq = Tensor::empty(q.shape(), DType::BF16, dev), dk = Tensor::empty(k.shape(), DType::BF16, dev),
           dv = Tensor::empty(v.shape(), DType::BF16, dev);
    const float scale = 1.f / std::sqrt(float(d));
    auto forward = [&] { ops::attention_forward(out, lse, q, k, v, t, scale, a.window); };
    auto backward = [&] { ops::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, scale, a.window); };
    const double fwd = median_seconds(be, a.warmup, a.reps, forward);
    forward();  // out and lse of these inputs for the backward
    const double bwd = median_seconds(be, a.warmup, a.reps, backward);
    const double w = a.window > 0 && a.window < t - 1 ? a.window : 0;
    const double pairs = w > 0 ? double(t) * (w + 1) - w * (w + 1) / 2 : double(t) * t / 2;
    const double fwd_flops = 4.0 * double(b) * h * pairs * d;
    // Peak device memory over both, inputs included: the route's workspace shows as the difference
    // between routes (cuDNN's deterministic backward holds a large one).
    const double peak_gib = allocator_for(dev).stats().peak_live_bytes / double(1 << 30);
    const char* route = std::getenv("NANODDP_CUDA_ATTENTION");
    nlohmann::json j{{"impl", "nanoddp"},
                     {"route", route != nullptr && *route != '\0' ? route : "auto"},
                     {"attention", cuda::describe_attention_route(cuda::parse_attention_route(route))},
                     {"batch", b},
                     {"seq", t},
                     {"heads", h},
                     {"kv_heads", hk},
                     {"head_dim", d},
                     {"window", a.window},
                     {"fwd_ms", 1e3 * fwd},
                     {"bwd_ms", 1e3 * bwd},
                     {"fwd_tflops", fwd_flops / fwd / 1e12},
                     {"bwd_tflops", 2.5 * fwd_flops / bwd / 1e12},
                     {"peak_mem_gib", peak_gib}};
    fmt::print("{}\n", j.dump());
  } catch (const Error& e) {
    fmt::print(stderr, "bench_attention_gpu: {}\n", e.what());
    return 1;
  }
  return 0;
}
