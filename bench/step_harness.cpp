#include "step_harness.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/timer.h"
#include "ops/backend.h"

namespace nanoddp::bench {

StepBench::StepBench(const StepBenchConfig& c, dist::ProcessGroup& group)
    : config_(model::GPTConfig::from_depth(c.depth, c.vocab, c.seq, 64, 128, 0, c.recipe)), device_(c.device),
      muon_momentum_(c.muon_momentum), loss_scale_(c.act_dtype == DType::F16 ? 65536.0 : 1.0) {
  model_ = std::make_unique<model::GPT>(config_, c.device, c.act_dtype);
  model_->init_weights(1);
  model_->set_fp8(c.fp8);
  reducer_ = std::make_unique<ddp::Reducer>(*model_, group,
                                            ddp::ReducerOptions{.zero = c.zero,
                                                                .whole_matrices = c.optimizer == ddp::OptimizerKind::Muon,
                                                                .first_bucket_mb = c.first_bucket_mb,
                                                                .bucket_cap_mb = c.bucket_cap_mb});
  reducer_->broadcast_parameters();
  ddp::OptimizerConfig oc;
  oc.optimizer = c.optimizer;
  if (config_.is_2026()) {
    oc.recipe_2026 = true;
    oc.embedding_lr = 0.3;
    oc.unembedding_lr = 0.008;
    oc.muon_weight_decay = 0.28;
  }
  optimizer_ = std::make_unique<ddp::Optimizer>(*model_, *reducer_, oc);
  x_ = Tensor::empty({c.batch, c.seq}, DType::I32);
  y_ = Tensor::empty({c.batch, c.seq}, DType::I32);
  Rng rng(c.data_seed, static_cast<uint64_t>(group.rank()));
  for (int64_t i = 0; i < x_.numel(); i++) {
    x_.data<int32_t>()[i] = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(c.vocab));
    y_.data<int32_t>()[i] = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(c.vocab));
  }
}

void StepBench::synchronize() { ops::backend(device_).synchronize(); }

double StepBench::step(double* exposed) {
  const double loss = model_->forward_backward(x_, y_, static_cast<float>(loss_scale_), false, reducer_->sync_hook());
  // On a GPU, finish() only orders the compute stream after the collectives (NcclWork::wait does
  // not block the host): timing it alone would time nothing. So let the backward's kernels finish
  // first, then time finish() up to the collectives' end: the communication the backward left.
  if (exposed != nullptr) synchronize();
  Stopwatch wait;
  reducer_->finish();
  if (exposed != nullptr) {
    synchronize();
    *exposed += wait.seconds();
  }
  // fp16: the trainer's dynamic loss scaling (Note [dynamic loss scaling] in train/loss_scaler.h), so
  // that its cost is timed too: unscale and check (an all-reduce of the overflow flag), and on an
  // overflow skip the step and halve the scale. The growth after 2000 good steps is left out: no
  // benchmark runs that long.
  if (loss_scale_ != 1.0 && !optimizer_->unscale_and_check(static_cast<float>(1.0 / loss_scale_))) {
    loss_scale_ *= 0.5;
    return loss;
  }
  optimizer_->step(1.0, muon_momentum_);
  return loss;
}

void print_breakdown(std::FILE* f, const std::map<std::string, ops::OpStats>& stats, int steps, double seconds,
                     const std::map<std::string, ops::OpStats>& detail) {
  auto row = [&](const std::string& name, const ops::OpStats& st) {
    fmt::print(f, "    {:<22} {:>8.2f} ms/step {:>5.1f}%  {:>6} calls/step{}\n", name, 1e3 * st.seconds / steps,
               100 * st.seconds / seconds, st.calls / steps,
               st.flops > 0 ? fmt::format("  {:.1f} GFLOP/s", st.flops / st.seconds / 1e9) : "");
  };
  double sum = 0;
  for (const auto& [name, st] : stats) {
    sum += st.seconds;
    row(name, st);
  }
  fmt::print(f, "    {:<22} {:>8.2f} ms/step {:>5.1f}%  of a {:.2f} ms step\n", "all ops", 1e3 * sum / steps,
             100 * sum / seconds, 1e3 * seconds / steps);
  if (detail.empty()) return;
  std::vector<std::pair<std::string, ops::OpStats>> by_time(detail.begin(), detail.end());
  std::sort(by_time.begin(), by_time.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  fmt::print(f, "    by shape (m x n x k, transposes of a and b, input->output dtype), most time first:\n");
  for (const auto& [name, st] : by_time) row(name, st);
}

}  // namespace nanoddp::bench
