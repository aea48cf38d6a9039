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

namespace {

// Python's round(): to the nearest integer, halves to even (the default rounding mode).
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace

double lr_multiplier_2026(int64_t it, int64_t n, int64_t warmup_steps, double warmdown_ratio, double final_lr_frac) {
  const int64_t warmdown = round_half_even(warmdown_ratio * static_cast<double>(n));
  if (it < warmup_steps) return static_cast<double>(it + 1) / static_cast<double>(warmup_steps);
  if (it <= n - warmdown) return 1.0;
  const double progress = static_cast<double>(n - it) / static_cast<double>(warmdown);
  return progress + (1.0 - progress) * final_lr_frac;
}

double muon_momentum_2026(int64_t it, int64_t n, double warmdown_ratio) {
  const int64_t warmdown = round_half_even(warmdown_ratio * static_cast<double>(n));
  const int64_t warmdown_start = n - warmdown;
  if (it < 400) {
    const double f = static_cast<double>(it) / 400.0;
    return (1.0 - f) * 0.85 + f * 0.97;
  }
  if (it >= warmdown_start) {
    const double progress = static_cast<double>(it - warmdown_start) / static_cast<double>(warmdown);
    return 0.97 * (1.0 - progress) + 0.90 * progress;
  }
  return 0.97;
}

double muon_weight_decay_2026(int64_t it, int64_t n, double weight_decay) {
  return weight_decay * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(it) / static_cast<double>(n)));
}

RecipeScaling recipe_scaling_2026(int64_t scaling_params, int64_t reference_scaling_params, double ratio,
                                  int64_t total_batch_size, double weight_decay) {
  RecipeScaling out;
  out.target_tokens = static_cast<int64_t>(ratio * static_cast<double>(scaling_params));
  NANODDP_CHECK(out.target_tokens > 0 && reference_scaling_params > 0, "--target_param_data_ratio {} gives no tokens "
                "to train on for {} scaling parameters: give a positive ratio", ratio, scaling_params);
  const double reference_tokens = ratio * static_cast<double>(reference_scaling_params);
  const auto b_ref = static_cast<double>(kReferenceBatchTokens);
  out.total_batch_size = total_batch_size;
  if (total_batch_size == -1) {
    const double predicted = b_ref * std::pow(static_cast<double>(out.target_tokens) / reference_tokens, 0.383);
    // The exponent stays in int64's range; a batch too large for the data is refused where it is used.
    out.total_batch_size = int64_t{1} << std::clamp<int64_t>(round_half_even(std::log2(predicted)), 0, 62);
  }
  const double batch_ratio = static_cast<double>(out.total_batch_size) / b_ref;
  out.lr_scale = std::sqrt(batch_ratio);
  out.weight_decay = weight_decay * std::sqrt(batch_ratio) * (reference_tokens / static_cast<double>(out.target_tokens));
  return out;
}

}  // namespace nanoddp::train
