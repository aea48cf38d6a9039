// nanochat's schedules. LR multiplier at step it of N: linear warmup over W = round(warmup_ratio
// N) steps, 1 until N - D (D = round(warmdown_ratio N)), then linear to final_lr_frac. Muon's
// momentum ramps linearly from 0.85 to 0.95 over the first 300 steps.
// The trainer calls both once per optimizer step.
#pragma once

#include <cstdint>
#include <string>

namespace nanoddp::train {

// it counts from 0. The result scales every parameter group's base learning rate.
double lr_multiplier(int64_t it, int64_t num_iterations, double warmup_ratio, double warmdown_ratio,
                     double final_lr_frac);
double muon_momentum(int64_t it);

// The most optimizer steps a run may have: 2^40, about 50 million times nanochat's d20 run. Step
// counts and the schedule's products of them (round(warmup_ratio x N), step x tokens) stay exact
// far below int64's range.
constexpr int64_t kMaxSteps = int64_t{1} << 40;
// The most tokens a run may train on, steps x tokens per step: 2^62, so that every count of tokens
// seen fits an int64.
constexpr int64_t kMaxRunTokens = int64_t{1} << 62;

// A run's length computed from a budget (--num_epochs, --target_flops, a data ratio) as a double,
// before it is rounded to an int64: above kMaxSteps it is refused with "too large" and the bound (the
// cast would overflow: a huge budget once became a 1-step run). `what` names the flag and its value.
void check_budget_steps(double steps, const std::string& what);
// Refuses steps x tokens_per_step above kMaxRunTokens, naming both.
void check_run_tokens(int64_t steps, int64_t tokens_per_step);

}  // namespace nanoddp::train
