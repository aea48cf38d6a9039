// The GPT's forward in double precision, built from the reference ops: the finite differences of
// its loss are the ground truth for the model's hand-written backward.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "reference.h"

namespace nanoddp::testing {

using Weights = std::map<std::string, reference::Vec>;

Weights weights_of(const model::GPT& gpt);
void set_weights(model::GPT& gpt, const Weights& w);

// Mean soft-capped cross-entropy over targets != -1; ids, targets [batch, seq] row-major.
double reference_loss(const model::GPTConfig& c, const Weights& w, const std::vector<int32_t>& ids,
                      const std::vector<int32_t>& targets, int64_t batch, int64_t seq);

}  // namespace nanoddp::testing
