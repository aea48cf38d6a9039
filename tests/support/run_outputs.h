// Reading what a training run left in its OUT directory, for tests that compare runs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nanoddp::testing {

// step -> `key` (e.g. "reward") of every line of OUT/metrics.jsonl that has it.
std::map<int64_t, double> training_metric(const std::string& out, const std::string& key);
// step -> training loss of every training line of OUT/metrics.jsonl.
std::map<int64_t, double> training_losses(const std::string& out);

// Every weight of a checkpoint directory's model.safetensors, in name order, as one vector.
std::vector<float> checkpoint_weights(const std::string& checkpoint_dir);

}  // namespace nanoddp::testing
