// One training step of nanochat's GPT on random tokens, shared by the training benchmarks
// (bench_train_cpu, bench_train_gpu, bench_train_ddp): the model, its Reducer and Optimizer over a
// process group, a fixed random micro-batch, and the step as the trainer runs it (forward and
// backward with the Reducer's hook, finish, optimizer step). Each benchmark adds only its timing
// and its baseline.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "comm/process_group.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "model/gpt.h"
#include "ops/profile.h"

namespace nanoddp::bench {

struct StepBenchConfig {
  int64_t depth = 4, vocab = 4096, seq = 128;
  int64_t batch = 16;  // rows of this rank's micro-batch
  Device device = Device::cpu();
  DType act_dtype = DType::F32;
  ddp::OptimizerKind optimizer = ddp::OptimizerKind::AdamW;  // or Muon (nanochat: Muon + AdamW)
  int zero = 0;
  double first_bucket_mb = 1.0, bucket_cap_mb = 25.0;  // PyTorch DDP's defaults
  double muon_momentum = 0.9;
  uint64_t data_seed = 3;  // tokens drawn from Rng(data_seed, rank)
  bool fp8 = false;        // GPT::set_fp8: the Linear layers' training GEMMs in FP8 (nanochat's --fp8)
  // The 2026 recipe: its model (SSSL windows) and, with Muon, its optimizer (Polar Express, NorMuon,
  // cautious weight decay) at base_train's learning rates and weight decay.
  model::Recipe recipe = model::Recipe::Classic;
};

class StepBench {
 public:
  StepBench(const StepBenchConfig& c, dist::ProcessGroup& group);
  // One optimizer step (with fp16, loss-scaled as the trainer does); returns the micro-batch loss.
  // With `exposed`, adds the seconds the step waited in Reducer::finish after its backward
  // (communication the backward did not hide); on a GPU that mode synchronises the device around
  // finish() so that the wait is real.
  double step(double* exposed = nullptr);
  // Blocks until the device has run everything queued (a no-op on the CPU): GPU timings end here.
  void synchronize();

  const model::GPTConfig& config() const { return config_; }
  // The micro-batch step() trains on (random tokens until a caller refills them, e.g. from a loader).
  Tensor& inputs() { return x_; }
  Tensor& targets() { return y_; }
  model::GPT& model() { return *model_; }
  ddp::Reducer& reducer() { return *reducer_; }
  ddp::Optimizer& optimizer() { return *optimizer_; }

 private:
  model::GPTConfig config_;
  Device device_;
  std::unique_ptr<model::GPT> model_;
  std::unique_ptr<ddp::Reducer> reducer_;
  std::unique_ptr<ddp::Optimizer> optimizer_;
  Tensor x_, y_;  // i32 [batch, seq] on the host
  double muon_momentum_;
  double loss_scale_;  // fp16: GradScaler's initial 2^16, halved on an overflow; else 1
};

// Prints an op profile (ops/profile.h) of `steps` steps that took `seconds` in all: each op's
// time per step, share of the step, calls per step and (GEMMs) FLOP rate, then the ops' sum; the
// rest of the step went to what is not an op (ops/profile.h). With `detail`
// (ops::profile_detail_snapshot), then the GEMMs by shape, most time first.
void print_breakdown(std::FILE* f, const std::map<std::string, ops::OpStats>& stats, int steps, double seconds,
                     const std::map<std::string, ops::OpStats>& detail = {});

}  // namespace nanoddp::bench
