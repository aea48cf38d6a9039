// OUT/metrics.jsonl: one JSON object per line, written by rank 0 only (print0 discipline).
// Training lines carry step, loss, lr, tokens_per_s, mfu, dt_ms, tokens; evaluation lines carry
// step, val_loss, val_bpb.
// Written by the trainer; scripts/main_job.sh and the test helpers (tests/support/run_outputs) read
// it back. One object per line, so a reader can follow the file as it grows.
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
  // One line, flushed at once, so a run that crashes keeps every line written before. A no-op on
  // ranks other than 0.
  void write(const nlohmann::json& line);

 private:
  // null on ranks other than 0.
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace nanoddp::train
