// OUT/metrics.jsonl: one JSON object per line, written by rank 0 only (print0 discipline). The
// console's step line uses the same names. Field names are stable:
//   every training line: step (after it), loss (mean over ranks, nats), lrm (learning-rate
//     multiplier of the schedule), epoch, dt_ms (the step's wall time);
//     rank 0's phases: data_ms, forward_ms, backward_ms, comm_ms (gradient communication the backward
//     did not hide), optimizer_ms (on a GPU forward_ms is 0 and backward_ms holds both: see
//     StepPhases in train/progress.h); rank 0's memory: host_rss_mb, host_peak_mb, device_peak_mb (GPU);
//   base and SFT: tokens (seen so far), tokens_per_s (all ranks), flops_per_s (model FLOP/s per
//     device, 6N + attention per token as nanochat counts), mfu (flops_per_s / the device's
//     datasheet peak or --peak_flops; absent when neither is known, e.g. on a CPU);
//   RL: reward (mean over the step's samples), sampled_tokens, sample_tokens_per_s, trained_tokens,
//     sample_ms;
//   with --grad_clip: grad_norm (the global norm before clipping); with --dtype fp16: loss_scale
//     (the scale the next step uses) and skipped (true when this step's gradients overflowed and
//     every rank skipped its update);
//   evaluation lines: step, val_loss, val_bpb;
//   with --num_epochs, a line at each epoch's end: step, epoch_end (1-based), train_loss (the mean of
//     its training lines' loss), train_steps (how many: those since a resume), and val_loss and
//     val_bpb of the state after it when the stage evaluates (Note [epoch lines] below).
// Written by the trainer; scripts/main_job.sh and the test helpers (tests/support/run_outputs) read
// it back. One object per line, so a reader can follow the file as it grows.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

namespace nanoddp::train {

class MetricsLog {
 public:
  // Rank 0 opens OUT/metrics.jsonl for appending; on a resume from step S it first drops the lines
  // the resumed run writes again (training lines after S, evaluations after S, and the one at S
  // when resume_step_evaluated: the resumed run evaluates S again). Other ranks write nothing.
  MetricsLog(const std::string& out, bool primary, int64_t resume_step, bool resume_step_evaluated);
  ~MetricsLog();
  // One line, flushed at once, so a run that crashes keeps every line written before. A no-op on
  // ranks other than 0.
  void write(const nlohmann::json& line);

 private:
  // null on ranks other than 0.
  std::FILE* file_ = nullptr;
  std::string path_;
};

struct EvalResult;

// Note [epoch lines]: with --num_epochs, an epoch holds whole steps (data::epoch_units), so the step
// whose read leaves the loader's cursor at the epoch's end ends it; the next loop turn evaluates the
// state after it and writes one line: the epoch's mean training loss and the validation of its end.
// The mean counts this process's steps of the epoch (a resume mid-epoch counts from the resume).
class EpochLog {
 public:
  // After a step: its loss joins the epoch's mean; `epoch_ended`: it was the epoch's last step.
  void count(double loss, bool epoch_ended);
  bool ended() const { return ended_; }
  // The line of the ended `epoch` (1-based) at `step`, with `val` when the state after that step was
  // evaluated (else nullptr); then a new epoch begins.
  void log(int64_t step, int64_t epoch, const EvalResult* val, MetricsLog& metrics);

 private:
  double loss_sum_ = 0;
  int64_t steps_ = 0;
  bool ended_ = false;
};

}  // namespace nanoddp::train
