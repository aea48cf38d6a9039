#include "run_outputs.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "test_util.h"

namespace nanoddp::testing {

std::map<int64_t, double> training_metric(const std::string& out, const std::string& key) {
  std::map<int64_t, double> m;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains(key)) continue;
    m[j["step"]] = j[key].is_boolean() ? static_cast<double>(j[key].get<bool>()) : j[key].get<double>();
  }
  return m;
}

std::map<int64_t, double> training_losses(const std::string& out) { return training_metric(out, "loss"); }

std::vector<float> checkpoint_weights(const std::string& checkpoint_dir) {
  SafetensorsFile f(checkpoint_dir + "/model.safetensors");
  std::vector<float> all;
  for (const auto& name : f.names()) {
    auto v = to_vector(f.read(name));
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace nanoddp::testing
