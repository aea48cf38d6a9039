// The GPT's forward in double precision, built from the reference ops: the finite differences of
// its loss are the ground truth for the model's hand-written backward.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "reference.h"
#include "test_util.h"

#include <nlohmann/json.hpp>

namespace nanoddp::testing {

using Weights = std::map<std::string, reference::Vec>;

Weights weights_of(const model::GPT& gpt);
void set_weights(model::GPT& gpt, const Weights& w);

// Mean soft-capped cross-entropy over targets != -1; ids, targets [batch, seq] row-major.
double reference_loss(const model::GPTConfig& c, const Weights& w, const std::vector<int32_t>& ids,
                      const std::vector<int32_t>& targets, int64_t batch, int64_t seq);

// Random N(0, 0.5) weights everywhere, each tensor from its own seed counting up from `seed`
// (nanochat's init zeroes lm_head and c_proj, which would hide most of the backward from a
// gradient check).
void randomise(model::GPT& gpt, uint64_t seed);

// Random ids and targets below `vocab`, i32 [b, t], with their copies as vectors; with_ignored sets
// target 1 to -1 (ignored), so the loss's divisor is checked too.
struct Batch {
  Tensor inputs, targets;
  std::vector<int32_t> ids, tgt;
};
Batch make_batch(int64_t b, int64_t t, int64_t vocab, uint64_t seed, bool with_ignored = true);

// The gradient check of the hand-written backward: `samples` entries of every parameter's .grad
// (from gpt's last forward_backward on `b`) against a central difference of step 1e-5 of the
// double-precision reference loss. The bound 2e-4 (relative, floor 1e-6) is f32 against double:
// rounding of f32 sums of a few hundred terms, far below what a wrong term in the backward gives.
void expect_gradients_match_reference(model::GPT& gpt, const Batch& b, int64_t samples);

// The file protocol of the PyTorch references under tools/ (torch_golden.py, torch_recipe2026.py):
// writes DIR/input.safetensors (every parameter of `gpt` under its name, `inputs`, `targets`) and
// DIR/config.json (`config`), then runs tools/<script> on DIR, which writes DIR/golden.safetensors.
CommandResult run_torch_reference(const std::string& script, const std::string& dir, const model::GPT& gpt,
                                  const Tensor& inputs, const Tensor& targets, const nlohmann::json& config);

}  // namespace nanoddp::testing
