#include "launch/launcher_stop.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace nanoddp::dist {

using std::chrono::milliseconds;

namespace {

// torchrun's grace before SIGKILL, the floor of a stop that saves.
constexpr milliseconds kSaveFloor{30000};
// A stop after a failure under "auto" (Note [a stop that saves]).
constexpr milliseconds kFailureGrace{5000};
// The longest grace "auto" gives, whatever a worker wrote: a week, the bound of every duration flag.
constexpr double kMaxGraceSeconds = 7 * 24 * 3600;

// The number at the start of a save-duration file; nullopt unless it is finite and >= 0. A file
// read while a worker rewrites it may be empty: that is no report, not an error.
std::optional<double> read_seconds(const std::string& path) {
  std::ifstream f(path);
  std::string text;
  if (!f || !std::getline(f, text)) return std::nullopt;
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(s) || s < 0) return std::nullopt;
  return s;
}

}  // namespace

SaveTimes::SaveTimes() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/nanoddp_run_saves_XXXXXX";
  if (::mkdtemp(templ.data()) != nullptr) dir_ = templ;
}

SaveTimes::~SaveTimes() {
  std::error_code ignored;  // a folder someone removed already is fine
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

std::string SaveTimes::path(int local_rank) const {
  return dir_.empty() ? "" : fmt::format("{}/local_rank_{}", dir_, local_rank);
}

std::optional<double> SaveTimes::longest(int nproc) const {
  std::optional<double> out;
  if (dir_.empty()) return out;
  for (int l = 0; l < nproc; l++)
    if (auto s = read_seconds(path(l)); s && (!out || *s > *out)) out = s;
  return out;
}

StopGrace stop_grace(std::optional<milliseconds> stop_timeout, bool to_save, std::optional<double> last_save_s) {
  auto seconds = [](milliseconds ms) { return std::chrono::duration<double>(ms).count(); };
  if (stop_timeout) return {*stop_timeout, fmt::format("--stop_timeout {:g} s", seconds(*stop_timeout))};
  if (!to_save) return {kFailureGrace, fmt::format("--stop_timeout auto: {:g} s after a failure", seconds(kFailureGrace))};
  if (!last_save_s)
    return {kSaveFloor, fmt::format("--stop_timeout auto: {:g} s, no save reported yet", seconds(kSaveFloor))};
  const double total = std::min(seconds(kSaveFloor) + 2 * *last_save_s, kMaxGraceSeconds);
  return {milliseconds(int64_t(total * 1000 + 0.5)),
          fmt::format("--stop_timeout auto: {:g} s, plus twice the last save's {:.1f} s", seconds(kSaveFloor),
                      *last_save_s)};
}

}  // namespace nanoddp::dist
