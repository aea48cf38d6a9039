#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"
#include "core/safetensors.h"

namespace nanoddp::train {

namespace fs = std::filesystem;

std::vector<int64_t> complete_checkpoint_steps(const std::string& out) {
  std::vector<int64_t> steps;
  const fs::path root = fs::path(out) / "checkpoints";
  if (!fs::is_directory(root)) return steps;
  // regex_match needs the whole name, so step_000500.tmp (a save in progress or interrupted) never
  // counts, and neither does a step directory without DONE.
  static const std::regex name(R"(step_(\d+))");
  for (const auto& entry : fs::directory_iterator(root)) {
    std::smatch m;
    const std::string n = entry.path().filename().string();
    if (std::regex_match(n, m, name) && fs::exists(entry.path() / "DONE")) steps.push_back(std::stoll(m[1]));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {

// fsync of a file or a directory (both open read-only). A directory's fsync makes the entries and
// renames in it durable. Returns whether it succeeded.
bool fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// set_checkpoint_write_hook's hook (tests).
std::function<void(const std::string&)>& write_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

// A small file (meta.json, DONE), on disk before it counts: its bytes reach the kernel only at the
// flush, so that is what is checked, and then its fsync (a full disk fails one of them).
void write_text(const fs::path& path, const std::string& text) {
  if (write_hook()) write_hook()(path.string());
  std::ofstream f(path);
  f << text;
  f.flush();
  const bool written = f.good();
  f.close();
  NANODDP_CHECK(written && !f.fail() && fsync_path(path), "cannot write {} (disk full?): {}", path.string(),
                std::strerror(errno));
}

void write_tensors(const fs::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  if (write_hook()) write_hook()(path.string());
  SafetensorsWriter w;
  for (const auto& [name, t] : tensors) w.add(name, t);
  w.write(path.string());
}

// Puts the complete checkpoint `tmp` in place as `final_dir`. rename() cannot replace a non-empty
// directory, so an existing checkpoint of the same step is renamed aside first and removed only
// once the new one is in place: a crash in between leaves the old one as step_N.old and the new
// one complete in step_N.tmp, never neither.
void publish(const fs::path& tmp, const fs::path& final_dir) {
  const fs::path old = final_dir.string() + ".old";
  if (fs::exists(final_dir)) {
    fs::remove_all(old);  // an older copy of this step, left by such a crash
    fs::rename(final_dir, old);
  }
  fs::rename(tmp, final_dir);
  fsync_path(final_dir.parent_path());  // best effort: not every file system syncs a directory
  fs::remove_all(old);
}

// The files of one save, into `tmp` (rank 0: also the weights, meta.json and, once every rank's
// files are on disk, DONE).
void write_checkpoint_files(const fs::path& tmp, const CheckpointContents& c, dist::ProcessGroup& group) {
  const bool primary = group.rank() == 0;
  CheckpointFiles files;
  // Each rank writes its own optimizer state (its shard under --zero); the weights are replicated,
  // so rank 0 alone writes them and meta.json.
  write_tensors(tmp / CheckpointFiles::optimizer(group.rank()), c.optimizer);
  if (primary) {
    write_tensors(tmp / files.model, c.model);
    write_text(tmp / files.meta, c.meta.dump(2));
  }
  group.barrier()->wait();  // every rank's files are on disk
  if (primary) write_text(tmp / "DONE", fmt::format("{}\n", c.step));
}

}  // namespace

void set_checkpoint_write_hook(std::function<void(const std::string&)> hook) { write_hook() = std::move(hook); }

std::vector<std::string> remove_interrupted_saves(const std::string& out) {
  std::vector<std::string> removed;
  const fs::path root = fs::path(out) / "checkpoints";
  if (!fs::is_directory(root)) return removed;
  // Exactly the name save_checkpoint stages in: step_, digits, .tmp.
  static const std::regex name(R"(step_\d+\.tmp)");
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string n = entry.path().filename().string();
    if (std::regex_match(n, name) && entry.is_directory() && !entry.is_symlink() &&
        !fs::exists(entry.path() / "DONE")) {
      fs::remove_all(entry.path());
      removed.push_back(n);
    }
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::string checkpoint_dir(const std::string& out, int64_t step) {
  return (fs::path(out) / "checkpoints" / fmt::format("step_{:06d}", step)).string();
}

std::string checkpoint_run_id(const std::string& out, int64_t step) {
  // Parsed leniently (not read_checkpoint_meta, which throws): an unreadable meta.json belongs to
  // no run, so its checkpoint is left alone rather than failing the caller.
  const auto meta = nlohmann::json::parse(std::ifstream(fs::path(checkpoint_dir(out, step)) / CheckpointFiles().meta),
                                          nullptr, false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("run_id") || !meta.at("run_id").is_string()) return "";
  return meta.at("run_id").get<std::string>();
}

std::optional<int64_t> latest_checkpoint(const std::string& out) {
  auto steps = complete_checkpoint_steps(out);
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

std::optional<int64_t> best_checkpoint(const std::string& out) {
  std::error_code ec;
  const fs::path target = fs::read_symlink(fs::path(out) / "best", ec);
  static const std::regex name(R"(step_(\d+))");
  std::smatch m;
  const std::string n = target.filename().string();
  if (ec || !std::regex_match(n, m, name) || !fs::exists(fs::path(out) / target / "DONE")) return std::nullopt;
  return std::stoll(m[1]);
}

namespace {

// Points OUT/best at checkpoint `step`: a new link renamed over the old one, so OUT/best is never
// missing or half-written. Relative, so that a run folder moved elsewhere keeps it.
void point_best_at(const std::string& out, int64_t step) {
  const fs::path link = fs::path(out) / "best", tmp = fs::path(out) / "best.tmp";
  std::error_code ignored;
  fs::remove(tmp, ignored);
  fs::create_directory_symlink(fs::path("checkpoints") / fmt::format("step_{:06d}", step), tmp);
  fs::rename(tmp, link);
}

}  // namespace

std::string resolve_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "DONE")) return path;
  auto latest = latest_checkpoint(path);
  NANODDP_CHECK(latest.has_value(), "{} is neither a complete checkpoint (no DONE file) nor a run directory with "
                "checkpoints/step_*/DONE", path);
  return checkpoint_dir(path, *latest);
}

nlohmann::json read_checkpoint_meta(const std::string& dir) {
  const fs::path path = fs::path(dir) / CheckpointFiles().meta;
  std::ifstream in(path);
  NANODDP_CHECK(in.good(), "cannot read {}", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    NANODDP_FAIL("{} is not valid JSON: {}", path.string(), e.what());
  }
}

void write_model_checkpoint(const std::string& out, int64_t step, const std::vector<std::pair<std::string, Tensor>>& model,
                            const nlohmann::json& meta) {
  const fs::path final_dir = checkpoint_dir(out, step), tmp = final_dir.string() + ".tmp";
  // A .tmp left by an interrupted import is discarded.
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_tensors(tmp / CheckpointFiles().model, model);
  write_text(tmp / CheckpointFiles().meta, meta.dump(2));
  write_text(tmp / "DONE", fmt::format("{}\n", step));
  publish(tmp, final_dir);
}

void save_checkpoint(const std::string& out, const CheckpointContents& c, dist::ProcessGroup& group, int keep_last) {
  const fs::path final_dir = checkpoint_dir(out, c.step), tmp = final_dir.string() + ".tmp";
  const bool primary = group.rank() == 0;
  if (primary) {
    fs::remove_all(tmp);  // a leftover of an interrupted save
    fs::create_directories(tmp);
  }
  // The directory exists before any rank writes into it.
  group.barrier()->wait();
  try {
    write_checkpoint_files(tmp, c, group);
  } catch (...) {
    // A full disk, or another rank's failure seen as a barrier's timeout: the partial save goes, so
    // that it neither fills the disk nor waits for a resume to find it.
    std::error_code ignored;
    if (primary) fs::remove_all(tmp, ignored);
    throw;
  }
  if (primary) {
    publish(tmp, final_dir);  // an older complete save of the same step is replaced as a whole
    // Prune only now that the new checkpoint is complete, so a crash never leaves fewer than before;
    // only this run's checkpoints (meta.json's run_id), so a folder that somehow holds another run's
    // never loses them to this one's rotation; and only steps before this one, which is kept
    // whatever --keep_last says (a later step is not this run's past: see Trainer::set_aside_later).
    // The best checkpoint (--save_best) is never rotated out.
    if (c.best) point_best_at(out, c.step);
    const std::optional<int64_t> best = best_checkpoint(out);
    std::vector<int64_t> ours;
    const std::string run_id = c.meta.value("run_id", std::string());
    for (int64_t step : complete_checkpoint_steps(out))
      if (step <= c.step && checkpoint_run_id(out, step) == run_id) ours.push_back(step);
    for (size_t i = 0; i + std::max(1, keep_last) < ours.size(); i++)
      if (ours[i] != best) fs::remove_all(checkpoint_dir(out, ours[i]));
  }
  // No rank returns before the checkpoint is published: a rank that exits or resumes right after
  // finds it complete.
  group.barrier()->wait();
}

}  // namespace nanoddp::train
