// Single-GPU training throughput of nanoddp: nanochat's GPT (vocab 65,536) at one depth, bf16
// activations, Muon + AdamW, one micro-step per optimizer step, random tokens. Measures, in the
// same process, the bf16 GEMM rate of this GPU through cuBLASLt, then prints one JSON line:
// tokens/s, MFU against this GPU's datasheet peak (ops/profile.h: the exact variant, e.g. H200 SXM
// or NVL) and against the measured GEMM rate, peak device memory and memory per token.
// bench/gpu_bench.sh runs it next to bench/torch_gpu_bench.py (PyTorch) on the same GPU.
// The timing window: at least --steps steps and at least --min_seconds of them (the step time
// measured on the last warm-up step), timed as two halves whose rates are reported as
// window_spread (|a - b| / mean): the window is long enough when that stays within 2%.
// --recipe 2026 times nanochat's 2026 model and optimizer instead (docs/recipe2026.md), against
// bench/torch_recipe2026_gpu_bench.py. With --breakdown N it then profiles N more steps (ops/profile.h: each op's device time between
// CUDA events) and prints the table to stderr; the timed steps above run without the markers.
//   build/bench/bench_train_gpu --depth 20 --seq 2048 --batch 16 [--breakdown 3]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/allocator.h"
#include "comm/process_group.h"
#include "core/rng.h"
#include "core/timer.h"
#include "ops/backend.h"
#include "ops/ops.h"
#include "ops/profile.h"
#include "step_harness.h"

namespace {

using namespace nanoddp;

struct Args {
  int depth = 20, seq = 2048, batch = 16, steps = 10, warmup = 3, vocab = 65536;
  int gemm_n = 8192;
  double min_seconds = 4;
  int breakdown = 0;
  bool fp8 = false;
  model::Recipe recipe = model::Recipe::Classic;
};

// The best of several bf16 GEMMs [n, n] x [n, n]^T -> bf16 (f32 accumulation), as the model's
// Linear layers run them: the peak this GPU reaches through cuBLASLt.
double bf16_gemm_peak(int64_t n, ops::Backend& be) {
  const Device dev = Device::cuda(0);
  Tensor a = Tensor::empty({n, n}, DType::BF16, dev), b = Tensor::empty({n, n}, DType::BF16, dev),
         c = Tensor::empty({n, n}, DType::BF16, dev);
  Tensor ha = Tensor::empty({n, n}, DType::F32);
  Rng rng(1);
  for (int64_t i = 0; i < ha.numel(); i++) ha.data<float>()[i] = rng.normal();  // not zeros: see METHOD.md
  Tensor da = ha.copy_to(dev);
  ops::cast(a, da);
  ops::cast(b, da);
  double best = 0;
  for (int rep = 0; rep < 12; rep++) {
    be.synchronize();
    Stopwatch sw;
    for (int i = 0; i < 5; i++) ops::matmul(c, a, false, b, true);
    be.synchronize();
    if (rep >= 2) best = std::max(best, 5 * 2.0 * n * n * n / sw.seconds());
  }
  return best;
}

// The timed steps: at least `min_steps` and at least `min_seconds` at `step_seconds` a step, even
// (two equal halves).
int timed_steps(int min_steps, double min_seconds, double step_seconds) {
  const double by_time = step_seconds > 0 ? std::ceil(min_seconds / step_seconds) : 0;
  const int n = std::max(min_steps, static_cast<int>(std::min(by_time, 100000.0)));
  return std::max(2, n + n % 2);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"nanoddp single-GPU training throughput (bf16), one JSON line"};
  app.add_option("--depth", a.depth);
  app.add_option("--seq", a.seq);
  app.add_option("--batch", a.batch, "Rows per micro-batch (device_batch_size)");
  app.add_option("--steps", a.steps, "Timed optimizer steps");
  app.add_option("--warmup", a.warmup, "Untimed steps first")->check(CLI::Range(1, 1000));
  app.add_option("--min_seconds", a.min_seconds, "Time at least this long (more steps than --steps if needed)")
      ->check(CLI::Range(0.0, 600.0));
  app.add_option("--vocab", a.vocab);
  app.add_option("--gemm_n", a.gemm_n, "Size of the square GEMM that measures the peak");
  app.add_option("--recipe", a.recipe, "classic, or 2026 (nanochat's current model and optimizer)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, model::Recipe>{{"classic", model::Recipe::Classic},
                                                                               {"2026", model::Recipe::R2026}}));
  app.add_option("--breakdown", a.breakdown, "Then profile this many steps: each op's device time (stderr)")
      ->check(CLI::Range(0, 1000));
  app.add_flag("--fp8", a.fp8, "The Linear layers' GEMMs in FP8 (nanochat's --fp8; MFU stays against the bf16 peak)");
  CLI11_PARSE(app, argc, argv);
  try {
    NANODDP_CHECK(cuda_device_count() > 0, "no GPU visible: this benchmark needs one");
    const Device dev = Device::cuda(0);
    ops::Backend& be = ops::backend(dev);
    const std::string no_fp8 = a.fp8 ? ops::fp8_unsupported(dev) : std::string();
    NANODDP_CHECK(no_fp8.empty(), "--fp8: {}", no_fp8);
    const double peak = bf16_gemm_peak(a.gemm_n, be);

    const auto config = model::GPTConfig::from_depth(a.depth, a.vocab, a.seq, 64, 128, 0, a.recipe);
    auto group = dist::make_single_rank_group(dev);
    bench::StepBench run({.depth = a.depth,
                          .vocab = a.vocab,
                          .seq = a.seq,
                          .batch = a.batch,
                          .device = dev,
                          .act_dtype = DType::BF16,
                          .optimizer = ddp::OptimizerKind::Muon,
                          .muon_momentum = 0.95,
                          .fp8 = a.fp8,
                          .recipe = a.recipe},
                         *group);
    double loss = 0;
    auto step = [&] { loss = run.step(); };
    for (int i = 0; i + 1 < a.warmup; i++) step();
    be.synchronize();
    Stopwatch one;
    step();
    be.synchronize();
    const int steps = timed_steps(a.steps, a.min_seconds, one.seconds());
    // Two halves of the window, each timed from a synchronised device to a synchronised device.
    double half_s[2];
    for (double& h : half_s) {
      Stopwatch sw;
      for (int i = 0; i < steps / 2; i++) step();
      be.synchronize();
      h = sw.seconds();
    }
    const double dt = half_s[0] + half_s[1];
    if (a.breakdown > 0) {
      ops::reset_profile();
      ops::set_profiling(true);
      Stopwatch psw;
      for (int i = 0; i < a.breakdown; i++) step();
      be.synchronize();
      const double pdt = psw.seconds();
      ops::set_profiling(false);
      fmt::print(stderr, "op breakdown, depth {} seq {} batch {}, {} profiled steps:\n", a.depth, a.seq, a.batch,
                 a.breakdown);
      bench::print_breakdown(stderr, ops::profile_snapshot(), a.breakdown, pdt, ops::profile_detail_snapshot());
    }
    const double tokens_per_s = double(a.batch) * a.seq * steps / dt;
    const ops::PeakFlops sheet = ops::peak_flops(dev);
    const double flops_per_token = config.flops_per_token(a.seq);
    const AllocatorStats mem = allocator_for(dev).stats();
    const char* route = std::getenv("NANODDP_CUDA_ATTENTION");  // ops/cuda/cudnn_attention.h
    nlohmann::json j{{"impl", a.fp8 ? "nanoddp_fp8" : "nanoddp"},
                     {"recipe", model::recipe_name(a.recipe)},
                     {"attention", route != nullptr && *route != '\0' ? route : "auto"},
                     {"depth", a.depth},
                     {"seq", a.seq},
                     {"batch", a.batch},
                     {"params", config.num_params()},
                     {"tokens_per_s", tokens_per_s},
                     {"steps", steps},
                     {"step_ms", 1e3 * dt / steps},
                     {"window_s", dt},
                     {"window_spread", std::abs(half_s[0] - half_s[1]) / (0.5 * dt)},
                     {"gemm_tflops", peak / 1e12},
                     {"mfu", flops_per_token * tokens_per_s / peak},
                     {"gpu", cuda_device_name(0)},
                     {"datasheet_tflops", sheet.flops / 1e12},
                     {"datasheet_what", sheet.what},
                     {"mfu_datasheet", sheet.flops > 0 ? flops_per_token * tokens_per_s / sheet.flops : 0.0},
                     {"peak_mem_gib", mem.peak_live_bytes / double(1 << 30)},
                     {"reserved_mem_gib", mem.system_bytes / double(1 << 30)},
                     {"mem_per_token_kib", mem.peak_live_bytes / 1024.0 / (double(a.batch) * a.seq)},
                     {"last_loss", loss}};
    fmt::print("{}\n", j.dump());
  } catch (const Error& e) {
    fmt::print(stderr, "bench_train_gpu: {}\n", e.what());
    return 1;
  }
  return 0;
}
