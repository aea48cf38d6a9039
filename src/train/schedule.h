// nanochat's schedules. LR multiplier at step it of N: linear warmup over W = round(warmup_ratio
// N) steps, 1 until N - D (D = round(warmdown_ratio N)), then linear to final_lr_frac. Muon's
// momentum ramps linearly from 0.85 to 0.95 over the first 300 steps.
// The trainer calls both once per optimizer step.
#pragma once

#include <cstdint>

namespace nanoddp::train {

// it counts from 0. The result scales every parameter group's base learning rate.
double lr_multiplier(int64_t it, int64_t num_iterations, double warmup_ratio, double warmdown_ratio,
                     double final_lr_frac);
double muon_momentum(int64_t it);

}  // namespace nanoddp::train
