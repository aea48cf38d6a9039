#include "train/metrics.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "train/val_bpb.h"

namespace nanoddp::train {

MetricsLog::MetricsLog(const std::string& out, bool primary, int64_t resume_step, bool resume_step_evaluated) {
  if (!primary) return;
  std::filesystem::create_directories(out);
  const std::string path = out + "/metrics.jsonl";
  if (resume_step >= 0 && std::filesystem::exists(path)) {
    std::ifstream in(path);
    std::stringstream kept;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      // A line cut short by a crash is not valid JSON: drop it rather than fail the resume.
      if (j.is_discarded()) continue;
      // A training line's step counts completed steps (line S is the checkpoint's last), and so does
      // an epoch's line (the resumed run does not write it again); an evaluation at step S is kept
      // unless the resumed run evaluates step S again.
      const int64_t step = j.value("step", int64_t{0});
      const bool keep = j.contains("loss") || j.contains("epoch_end") ? step <= resume_step
                                           : step < resume_step || (step == resume_step && !resume_step_evaluated);
      if (keep) kept << line << '\n';
    }
    in.close();
    // Atomically: a failure here (a disk still full) must not lose the history.
    write_file_atomically(path, kept.str());
  } else if (resume_step < 0) {
    std::filesystem::remove(path);  // a fresh run starts a fresh log
  }
  path_ = path;
  file_ = std::fopen(path.c_str(), "a");
  NANODDP_CHECK(file_ != nullptr, "cannot open {} for writing", path);
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& line) {
  if (!file_) return;
  std::string s = line.dump();
  // A full disk must not go unnoticed while training goes on: the metrics are the run's record.
  NANODDP_CHECK(std::fprintf(file_, "%s\n", s.c_str()) >= 0 && std::fflush(file_) == 0, "cannot write {} (disk "
                "full?): free space, then continue with --resume latest", path_);
}

void EpochLog::count(double loss, bool epoch_ended) {
  loss_sum_ += loss;
  steps_++;
  ended_ = epoch_ended;
}

void EpochLog::log(int64_t step, int64_t epoch, const EvalResult* val, MetricsLog& metrics) {
  const double mean = loss_sum_ / static_cast<double>(steps_);
  nlohmann::json line = {{"step", step}, {"epoch_end", epoch}, {"train_loss", mean}, {"train_steps", steps_}};
  std::string console =
      fmt::format("epoch {} done at step {} | train loss {:.4f} (mean of {} steps)", epoch, step, mean, steps_);
  if (val != nullptr) {
    line.update({{"val_loss", val->loss}, {"val_bpb", val->bpb}});
    console += fmt::format(" | val loss {:.4f} | val bpb {:.4f}", val->loss, val->bpb);
  }
  log::print0("{}", console);
  metrics.write(line);
  *this = EpochLog{};
}

}  // namespace nanoddp::train
