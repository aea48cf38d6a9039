// What a run reports about each step beyond its loss: where the step's time went and how much
// memory the rank holds. The trainer puts both into metrics.jsonl under the names documented in
// train/metrics.h, and its console line uses the same names.
#pragma once

#include <string>

#include "core/device.h"

namespace nanoddp::train {

// Seconds of one optimizer step on this rank, by phase. On a GPU the boundaries wait for the
// device, so each phase holds its kernels' time, not their launches'; the micro-steps are not
// waited for one by one (Note [reading the loss] in train/token_stage.cpp), so there the forward
// counts in backward and forward is 0.
struct StepPhases {
  double data = 0;          // reading micro-batches
  double sample = 0;        // RL: generating completions
  double forward = 0;       // embedding and blocks
  double backward = 0;      // LM head, loss and the backward
  double exposed_comm = 0;  // waiting for gradient collectives after the backward (what overlap did not hide)
  double optimizer = 0;     // the optimizer step (with --zero: its all_gather)
};

struct MemoryUse {
  double host_rss_mb = 0;     // resident now (/proc/self/status VmRSS)
  double host_peak_mb = 0;    // the process's high-water mark (VmHWM)
  double device_peak_mb = 0;  // a GPU's: the caching allocator's peak of live bytes (0 on the CPU)
};

MemoryUse memory_use(Device device);

// "1h02m", "3m07s", "12s"
std::string format_duration(double seconds);

}  // namespace nanoddp::train
