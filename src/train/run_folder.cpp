#include "train/run_folder.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "core/files.h"
#include "train/checkpoint.h"

namespace nanoddp::train {

namespace fs = std::filesystem;

std::optional<RunInfo> read_run_info(const std::string& out) {
  const fs::path path = fs::path(out) / "run.json";
  if (!fs::exists(path)) return std::nullopt;
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in, nullptr, false);
  NANODDP_CHECK(!j.is_discarded() && j.is_object() && j.contains("run_id"), "{} is not a run description (JSON with "
                "run_id): restore it from a backup, or move the folder aside and start a new run", path.string());
  return RunInfo{j.value("run_id", std::string()), j.value("job_id", std::string())};
}

void write_run_info(const std::string& out, const RunInfo& info) {
  fs::create_directories(out);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  write_file_atomically((fs::path(out) / "run.json").string(),
                        nlohmann::json{{"run_id", info.run_id},
                                       {"job_id", info.job_id},
                                       {"created_unix", std::chrono::duration_cast<std::chrono::seconds>(now).count()}}
                                .dump(2) +
                            "\n");
}

std::string new_run_id() {
  // Two runs started in the same second on different nodes must differ: mix in real entropy.
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", t * 0x9E3779B97F4A7C15ull ^ r);
}

std::string current_job_id() {
  const char* id = std::getenv("NANODDP_JOB_ID");
  return id != nullptr ? id : "";
}

std::string describe_run(const std::string& out) {
  const auto info = read_run_info(out);
  const auto latest = latest_checkpoint(out);
  const bool metrics = fs::exists(fs::path(out) / "metrics.jsonl");
  if (!info && !latest && !metrics) return "";
  std::string what = info ? fmt::format("run {}", info->run_id) : "a run";
  if (latest) return fmt::format("{} with checkpoints up to step {}", what, *latest);
  return fmt::format("{} with metrics.jsonl but no complete checkpoint", what);
}

std::string move_run_aside(const std::string& out) {
  const auto info = read_run_info(out);
  const std::string base = fs::path(out).lexically_normal().string();
  const std::string stem = fmt::format("{}.previous-{}", base.back() == '/' ? base.substr(0, base.size() - 1) : base,
                                       info ? info->run_id : new_run_id());
  std::string dest = stem;
  for (int i = 2; fs::exists(dest); i++) dest = fmt::format("{}-{}", stem, i);
  std::error_code ec;
  fs::rename(out, dest, ec);
  NANODDP_CHECK(!ec, "--overwrite: cannot move {} aside to {} ({}): move or remove it yourself", out, dest,
                ec.message());
  return dest;
}

std::vector<int64_t> set_aside_checkpoints_after(const std::string& out, int64_t step, std::string* dest) {
  std::vector<int64_t> later;
  for (int64_t s : complete_checkpoint_steps(out))
    if (s > step) later.push_back(s);
  if (later.empty()) return later;
  const fs::path root = fs::path(out) / "checkpoints";
  const std::string stem = (root / fmt::format("after_step_{:06d}", step)).string();
  std::string folder = stem;
  for (int i = 2; fs::exists(folder); i++) folder = fmt::format("{}-{}", stem, i);
  fs::create_directories(folder);
  for (int64_t s : later) {
    const fs::path from = checkpoint_dir(out, s);
    std::error_code ec;
    fs::rename(from, fs::path(folder) / from.filename(), ec);
    NANODDP_CHECK(!ec, "cannot move checkpoint {} into {} ({}): move it out of {} yourself, then resume again",
                  from.string(), folder, ec.message(), root.string());
  }
  if (dest != nullptr) *dest = folder;
  return later;
}

}  // namespace nanoddp::train
