// Reading what a training run left in its OUT directory, for tests that compare runs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nanoddp::testing {

// step -> training loss of every training line of OUT/metrics.jsonl.
std::map<int64_t, double> training_losses(const std::string& out);

// Every weight of a checkpoint directory's model.safetensors, in name order, as one vector.
std::vector<float> checkpoint_weights(const std::string& checkpoint_dir);

}  // namespace nanoddp::testing
