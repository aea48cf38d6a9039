// The training loop (nanochat's base_train, native): gradient accumulation, DDP gradient
// synchronisation overlapped with the last micro-step's backward, the LR and momentum schedules,
// periodic evaluation in bits per byte, atomic checkpoints and bitwise-exact resume, and a sample
// at the end. Only rank 0 prints and writes metrics.
// Called by `nanoddp train` (cli/cmd_train.cpp) and tests/train.
#pragma once

#include <cstdint>
#include <optional>

#include "comm/process_group.h"
#include "train/val_bpb.h"
#include "train/options.h"

namespace nanoddp::train {

struct TrainResult {
  int64_t last_step = 0;          // the step the run stopped at (num_iterations or --stop_at)
  double last_loss = 0;           // training loss of the last step taken (all ranks' mean)
  std::optional<EvalResult> eval; // the last evaluation
  int stopped_by_signal = 0;      // SIGTERM/SIGINT/SIGHUP: saved at last_step and stopped early (else 0)
};

// Runs `opts` on `group` (one rank per process; a single-rank group without a launcher) with this
// rank computing on `device`. First checks that every rank has the same options, dataset and
// build (comm/consistency.h).
// Collective: every rank calls it with the same options. Throws nanoddp::Error on bad options, a
// rank that disagrees, or a checkpoint that does not fit this run.
TrainResult run_training(const TrainOptions& opts, dist::ProcessGroup& group, Device device);


}  // namespace nanoddp::train
