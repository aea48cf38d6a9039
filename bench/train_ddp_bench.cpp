// bench_train_ddp: data-parallel training throughput of the CPU benchmark model (
// nanochat's GPT at depth 4, vocab 4096, T 128, global batch 16 rows), under any launcher:
//   build/bench/bench_train_ddp                                                     (one process)
//   build/nanoddp run --standalone --nproc_per_node 2 build/bench/bench_train_ddp   (two ranks, global batch kept)
// Besides tokens/s it measures how much of the gradient communication the backward hides:
// exposed = the time the step waits in Reducer::finish after its backward, alone = the same bucket
// collectives run back to back without compute; hidden = 1 - exposed / alone.
// bench/ddp_cpu_bench.sh runs it at 1 and 2 ranks next to PyTorch 1.13 DDP on the same model.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/option_flags.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/timer.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "comm/init.h"
#include "model/gpt.h"
#include "ops/backend.h"
#include "comm/consistency.h"
#include "step_harness.h"

namespace nanoddp {

namespace {

using cli::add_option_flags;

struct BenchTrainOptions {
  int64_t depth = 4, vocab = 4096, seq = 128, global_batch = 16;
  int steps = 20, warmup = 3;
  ddp::OptimizerKind optimizer = ddp::OptimizerKind::AdamW;
  int zero = 0;
  double bucket_cap_mb = 25, first_bucket_mb = 1;
  std::string device = "cpu";
  dist::BackendKind backend = dist::BackendKind::Auto;
  std::string dtype = "auto";

  template <typename V>
  void visit(V&& v) {
    v(depth, "depth", "model depth");
    v(vocab, "vocab", "vocabulary size");
    v(seq, "seq", "sequence length");
    v(global_batch, "global_batch", "rows per step over all ranks (each rank takes global_batch / world)");
    v(steps, "steps", "timed steps");
    v(warmup, "warmup", "untimed steps first");
    v(optimizer, "optimizer", "adamw or muon");
    v(zero, "zero", "optimizer sharding 0, 1 or 2");
    v(bucket_cap_mb, "bucket_cap_mb", "gradient bucket cap in MiB (PyTorch DDP: 25)");
    v(first_bucket_mb, "first_bucket_mb", "first gradient bucket in MiB (PyTorch DDP: 1)");
    v(device, "device", "cpu or cuda");
    v(backend, "backend", "process group backend");
    v(dtype, "dtype", "activations: auto (fp32 on the CPU, bf16 on CUDA), fp32, bf16 or fp16 (loss-scaled)");
  }
};

struct Timing {
  double step = 0, exposed = 0;  // seconds, summed over timed steps
};

void run(const BenchTrainOptions& o) {
  const Device device = dist::local_device(o.device, dist::discover_environment());
  dist::DistOptions d;
  d.backend = o.backend;
  auto ctx = dist::init_distributed(d, device);
  dist::ProcessGroup& group = *ctx->group;
  const int world = group.size();
  NANODDP_CHECK(o.global_batch % world == 0, "--global_batch {} does not divide over {} ranks", o.global_batch, world);
  const int64_t batch = o.global_batch / world;
  NANODDP_CHECK(o.dtype == "auto" || o.dtype == "fp32" || o.dtype == "bf16" || o.dtype == "fp16",
                "--dtype must be auto, fp32, bf16 or fp16 (got '{}')", o.dtype);
  bench::StepBench run({.depth = o.depth,
                        .vocab = o.vocab,
                        .seq = o.seq,
                        .batch = batch,
                        .device = device,
                        .act_dtype = o.dtype == "fp16"                                        ? DType::F16
                                     : o.dtype == "bf16" || (o.dtype == "auto" && device.is_cuda()) ? DType::BF16
                                                                                                      : DType::F32,
                        .optimizer = o.optimizer,
                        .zero = o.zero,
                        .first_bucket_mb = o.first_bucket_mb,
                        .bucket_cap_mb = o.bucket_cap_mb,
                        .data_seed = 7},
                       group);
  ddp::Reducer& reducer = run.reducer();
  const model::GPTConfig& config = run.config();
  Timing t;
  for (int i = 0; i < o.warmup + o.steps; i++) {
    if (i == o.warmup) t = {};
    Stopwatch step;
    run.step(&t.exposed);
    run.synchronize();  // a GPU step has ended when its kernels have
    t.step += step.seconds();
  }
  // The same bucket collectives alone, back to back (what the backward had to hide): allreduce, or
  // with --zero 2 reduce_scatter, as the Reducer issues them.
  double alone = 0;
  if (world > 1) {
    alone = 1e30;
    for (int rep = 0; rep < 5; rep++) {
      group.barrier()->wait();
      Stopwatch sw;
      std::vector<dist::WorkPtr> works;
      for (size_t b = 0; b < reducer.layout().buckets.size(); b++) {
        const Tensor& g = reducer.grads(static_cast<int>(b));
        const ddp::Bucket& bk = reducer.layout().buckets[b];
        const int64_t lo = bk.shard_begin(group.rank(), world), hi = bk.shard_end(group.rank(), world);
        works.push_back(o.zero == 2 ? group.reduce_scatter(g.region(lo, {hi - lo}), g, dist::ReduceOp::Avg)
                                    : group.allreduce(g, dist::ReduceOp::Avg));
      }
      for (auto& w : works) w->wait();
      run.synchronize();  // NCCL: wait() ordered the compute stream only; the host waits here
      alone = std::min(alone, sw.seconds());
    }
  }
  // The slowest rank sets the pace.
  std::vector<double> v{t.step / o.steps, t.exposed / o.steps, alone};
  dist::allreduce_scalars(group, v, dist::ReduceOp::Max);
  const double step_s = v[0], exposed = v[1];
  alone = v[2];
  const double tok_s = static_cast<double>(o.global_batch * o.seq) / step_s;
  const double hidden = world > 1 && alone > 0 ? std::clamp(1.0 - exposed / alone, 0.0, 1.0) : 0.0;
  log::print0("bench_train_ddp: {} rank(s) x {} rows x {} tokens, {} threads/rank, {} ({:.2f}M params), "
              "optimizer {} zero {}, {} buckets", world, batch, o.seq, ops::cpu_threads(), ctx->backend,
              config.num_params() / 1e6, option_text(o.optimizer), o.zero, reducer.layout().buckets.size());
  log::print0("  step {:.1f} ms | {:.0f} tok/s | comm alone {:.2f} ms/step | exposed {:.2f} ms/step | hidden {:.0f}%",
              step_s * 1e3, tok_s, alone * 1e3, exposed * 1e3, 100 * hidden);
  // Optimizer state on the largest rank: about 1/W of the replicated state with --zero 1 or 2.
  std::vector<double> state{static_cast<double>(run.optimizer().state_bytes())};
  dist::allreduce_scalars(group, state, dist::ReduceOp::Max);
  log::print0("  optimizer state: {:.2f} MiB on the largest rank", state[0] / 1048576.0);
  log::print0("{}", nlohmann::json{{"world", world},
                                   {"tokens_per_s", tok_s},
                                   {"step_ms", step_s * 1e3},
                                   {"comm_alone_ms", alone * 1e3},
                                   {"exposed_ms", exposed * 1e3},
                                   {"hidden", hidden},
                                   {"optimizer_state_mib", state[0] / 1048576.0}}
                        .dump());
}

}  // namespace
}  // namespace nanoddp

int main(int argc, char** argv) {
  using namespace nanoddp;
  CLI::App app{"Data-parallel training throughput and communication hidden by backward", "bench_train_ddp"};
  BenchTrainOptions options;
  add_option_flags(app, options);
  CLI11_PARSE(app, argc, argv);
  try {
    run(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train_ddp: error: [rank %d] %s\n", log::rank(), e.what());
    return 1;
  }
  return 0;
}
