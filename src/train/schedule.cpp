#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace nanoddp::train {

double lr_multiplier(int64_t it, int64_t n, double warmup_ratio, double warmdown_ratio, double final_lr_frac) {
  const int64_t warmup = std::llround(warmup_ratio * n), warmdown = std::llround(warmdown_ratio * n);
  // it + 1: the first step already has a non-zero learning rate.
  if (it < warmup) return static_cast<double>(it + 1) / warmup;
  if (it <= n - warmdown) return 1.0;
  // progress reaches 0 only at it = n, a step never taken: the last step's multiplier is slightly
  // above final_lr_frac.
  const double progress = static_cast<double>(n - it) / warmdown;
  return progress + (1.0 - progress) * final_lr_frac;
}

void check_budget_steps(double steps, const std::string& what) {
  NANODDP_CHECK(!std::isnan(steps), "{} gives no number of steps", what);
  NANODDP_CHECK(steps <= static_cast<double>(kMaxSteps), "{} is too large: it makes {:.3g} optimizer steps, and a "
                "run has at most {} (2^40)", what, steps, kMaxSteps);
}

void check_run_tokens(int64_t steps, int64_t tokens_per_step) {
  NANODDP_CHECK(tokens_per_step <= 0 || steps <= kMaxRunTokens / tokens_per_step, "{} steps x {} tokens per step is "
                "too large: a run trains on at most {} (2^62) tokens; lower --num_iterations or the batch", steps,
                tokens_per_step, kMaxRunTokens);
}

double muon_momentum(int64_t it) {
  const double f = std::min(static_cast<double>(it) / 300.0, 1.0);
  return (1.0 - f) * 0.85 + f * 0.95;
}

}  // namespace nanoddp::train
