// OUT/metrics.jsonl: one JSON object per line, written by rank 0 only (print0 discipline).
// Training lines carry step, loss, lr, tokens_per_s, mfu, dt_ms, tokens; evaluation lines carry
// step, val_loss, val_bpb.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

namespace nanoddp::train {

class MetricsLog {
 public:
  // Rank 0 opens OUT/metrics.jsonl for appending; on a resume from step S it first drops the lines
  // the resumed run writes again (training lines after S, evaluations from S on). Other ranks
  // write nothing.
  MetricsLog(const std::string& out, bool primary, int64_t resume_step);
  ~MetricsLog();
  void write(const nlohmann::json& line);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace nanoddp::train
