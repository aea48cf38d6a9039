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

// The 2026 recipe's schedules (nanochat's base_train today). Python's round() there rounds halves to
// even, and so do these (round(0.65 x 10) is 6). LR multiplier: linear warmup over warmup_steps
// steps, 1 until N - D (D = round(warmdown_ratio N)), then linear to final_lr_frac. Muon momentum:
// 0.85 to 0.97 over the first 400 steps, 0.97, then from N - D down to 0.90 at N. Muon weight
// decay: cosine from weight_decay at step 0 to 0 at N.
double lr_multiplier_2026(int64_t it, int64_t num_iterations, int64_t warmup_steps, double warmdown_ratio,
                          double final_lr_frac);
double muon_momentum_2026(int64_t it, int64_t num_iterations, double warmdown_ratio);
double muon_weight_decay_2026(int64_t it, int64_t num_iterations, double weight_decay);

// nanochat's scaling of the 2026 recipe with model size, from the tokens:params ratio R, where the
// params are the scaling params (block matrices + lm_head) P of this model and P12 of the same
// recipe at depth 12, the reference whose best batch was measured as B_ref = 2^19 tokens:
//   target tokens D = floor(R P), D_ref = R P12;
//   batch B (when not given) = 2^round(log2(B_ref (D / D_ref)^0.383)), the Power Lines fit;
//   every lr times sqrt(B / B_ref); Muon's weight decay times sqrt(B / B_ref) D_ref / D;
//   steps (when no other budget is given) = floor(D / B).
struct RecipeScaling {
  int64_t target_tokens = 0;
  int64_t total_batch_size = 0;  // tokens per step
  double lr_scale = 1, weight_decay = 0;
};
constexpr int64_t kReferenceBatchTokens = int64_t{1} << 19;
// total_batch_size -1 chooses the batch as above; otherwise it is kept.
RecipeScaling recipe_scaling_2026(int64_t scaling_params, int64_t reference_scaling_params, double ratio,
                                  int64_t total_batch_size, double weight_decay);

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
