// The report across a pipeline's stages (Note [pipeline report] in report.h), and the pieces the
// one-run report shares with it: readable dates and each stage's own options.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "train/checkpoint.h"
#include "train/options.h"
#include "train/progress.h"
#include "train/report.h"

namespace nanoddp::train {

namespace fs = std::filesystem;

std::string utc_time(int64_t unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::vector<std::pair<std::string, std::string>> stage_options(const nlohmann::json& options,
                                                               const std::string& stage) {
  std::vector<std::pair<std::string, std::string>> rows;
  if (!options.is_object()) return rows;
  // Which options are RL's or the chat stages' is read from their help text (train/options.h):
  // RL's begin "RL", the chat stages' name --conversations; so a new option is placed as it is added.
  TrainOptions defaults;
  defaults.visit([&](const auto&, const char* name, const char* help) {
    const std::string_view h(help);
    const bool rl_only = h.starts_with("RL");
    const bool chat_only = std::string_view(name) == "conversations" || std::string_view(name) == "val_conversations" ||
                           h.starts_with("With --conversations");
    if ((stage == "base" && (rl_only || chat_only)) || (stage == "sft" && rl_only) || (stage == "rl" && chat_only))
      return;
    const auto it = options.find(name);
    if (it == options.end() || (it->is_string() && it->get<std::string>().empty())) return;
    rows.emplace_back(name, it->is_string() ? it->get<std::string>() : it->dump());
  });
  return rows;
}

std::string record_eval(const std::string& checkpoint, const nlohmann::json& result) {
  const fs::path dir = fs::path(checkpoint).lexically_normal();
  // RUN/checkpoints/step_N (a trailing '/' leaves an empty filename: parent_path() drops it first).
  const fs::path ck = dir.has_filename() ? dir : dir.parent_path();
  const bool in_run = ck.parent_path().filename() == "checkpoints";
  const fs::path file = (in_run ? ck.parent_path().parent_path() : ck) / "evals.jsonl";
  nlohmann::json line = result;
  line["time_unix"] = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  std::ofstream out(file, std::ios::app);
  out << line.dump() << "\n";
  out.flush();
  NANODDP_CHECK(out.good(), "cannot append the evaluation to {}: is the run folder writable?", file.string());
  return file.string();
}

namespace {

// The stages in their pipeline order; others after them.
int stage_rank(const std::string& stage) {
  return stage == "base" ? 0 : stage == "sft" ? 1 : stage == "rl" ? 2 : 3;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, false);
}

// Every JSON line of a .jsonl file (unparsable lines skipped: a line cut by a crash).
std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) lines.push_back(std::move(j));
  }
  return lines;
}

// What the report needs of one run folder.
struct Stage {
  std::string dir, stage;
  nlohmann::json run, meta;                         // run.json, the newest checkpoint's meta.json
  std::vector<nlohmann::json> steps, vals, evals;  // metrics.jsonl's training and validation lines, evals.jsonl
  int64_t metrics_time = 0;                         // when metrics.jsonl was last written (Unix seconds)
};

Stage read_stage(const std::string& dir) {
  Stage s;
  s.dir = dir;
  s.run = read_json(fs::path(dir) / "run.json");
  if (auto step = latest_checkpoint(dir)) s.meta = read_checkpoint_meta(checkpoint_dir(dir, *step));
  for (auto& j : read_lines(fs::path(dir) / "metrics.jsonl")) (j.contains("val_bpb") ? s.vals : s.steps).push_back(j);
  s.evals = read_lines(fs::path(dir) / "evals.jsonl");
  std::error_code ec;
  const auto mtime = fs::last_write_time(fs::path(dir) / "metrics.jsonl", ec);
  if (!ec) {
    s.metrics_time = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::file_clock::to_sys(mtime).time_since_epoch()).count();
  }
  s.stage = s.meta.is_object() ? s.meta.value("stage", "") : "";
  if (s.stage.empty() && s.meta.is_object() && s.meta.contains("options"))
    s.stage = s.meta["options"].value("stage", "");
  return s;
}

double number(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

}  // namespace

std::vector<std::string> pipeline_runs(const std::vector<std::string>& inputs) {
  NANODDP_CHECK(!inputs.empty(), "give the run folders (--out of train, sft, rl) or a folder holding them");
  std::vector<std::string> runs;
  for (const auto& input : inputs) {
    if (fs::exists(fs::path(input) / "metrics.jsonl")) {
      runs.push_back(input);
      continue;
    }
    std::error_code ec;
    NANODDP_CHECK(fs::is_directory(input, ec), "{} is not a folder: give run folders (--out of train, sft, rl) or a "
                  "folder holding them", input);
    std::vector<std::pair<int, std::string>> found;
    for (const auto& e : fs::directory_iterator(input, ec))
      if (fs::exists(e.path() / "metrics.jsonl")) found.emplace_back(stage_rank(read_stage(e.path().string()).stage),
                                                                     e.path().string());
    NANODDP_CHECK(!found.empty(), "{} holds no run: neither it nor a folder directly inside it has a metrics.jsonl; "
                  "give the --out folders of train, sft and rl", input);
    std::sort(found.begin(), found.end());
    for (auto& [rank, dir] : found) runs.push_back(dir);
  }
  return runs;
}

namespace {

using Rows = std::vector<std::pair<std::string, std::string>>;

std::string markdown_table(const Rows& rows) {
  std::string md = "| | |\n|---|---|\n";
  for (const auto& [k, v] : rows) md += fmt::format("| {} | {} |\n", k, v);
  return md + "\n";
}

// "accuracy on TASK" for an evaluation line, the key of its row in the summary.
std::string eval_key(const nlohmann::json& e) {
  return fmt::format("accuracy on {}", fs::path(e.value("task", std::string("?"))).filename().string());
}

// Rows of the summary for one stage: name -> value ("" where the stage has none).
std::vector<std::pair<std::string, std::string>> stage_numbers(const Stage& s) {
  Rows rows;
  const nlohmann::json last = s.steps.empty() ? nlohmann::json() : s.steps.back();
  double seconds = 0;
  for (const auto& j : s.steps) seconds += std::isfinite(number(j, "dt_ms")) ? number(j, "dt_ms") / 1000 : 0;
  rows.emplace_back("steps", std::isfinite(number(last, "step")) ? fmt::format("{}", number(last, "step")) : "");
  rows.emplace_back("tokens", std::isfinite(number(last, "tokens")) ? short_number(number(last, "tokens")) : "");
  rows.emplace_back("training time (steps only)", s.steps.empty() ? "" : format_duration(seconds));
  rows.emplace_back("last training loss", std::isfinite(number(last, "loss")) ? fmt::format("{:.4f}", number(last, "loss")) : "");
  double best = INFINITY;
  for (const auto& v : s.vals)
    if (std::isfinite(number(v, "val_bpb"))) best = std::min(best, number(v, "val_bpb"));
  rows.emplace_back("best val bpb", std::isfinite(best) ? fmt::format("{:.4f}", best) : "");
  rows.emplace_back("last mean reward", std::isfinite(number(last, "reward")) ? fmt::format("{:.4f}", number(last, "reward")) : "");
  // The newest evaluation per task.
  for (const auto& e : s.evals) {
    const std::string key = eval_key(e);
    const std::string value = fmt::format("{:.4f}", number(e, "accuracy"));
    auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == key; });
    if (it == rows.end()) rows.emplace_back(key, value);
    else it->second = value;
  }
  return rows;
}

// The summary table: one row per metric any stage has, one column per stage.
std::string summary_table(const std::vector<Stage>& stages) {
  std::vector<std::string> keys;
  std::vector<Rows> columns;
  for (const auto& s : stages) {
    columns.push_back(stage_numbers(s));
    for (const auto& [k, v] : columns.back())
      if (!v.empty() && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  std::string md = "| metric |";
  std::string rule = "|---|";
  for (const auto& s : stages) md += fmt::format(" {} |", s.stage.empty() ? s.dir : s.stage), rule += "---|";
  md += "\n" + rule + "\n";
  for (const auto& k : keys) {
    md += "| " + k + " |";
    for (const auto& c : columns) {
      auto it = std::find_if(c.begin(), c.end(), [&](const auto& r) { return r.first == k; });
      md += fmt::format(" {} |", it != c.end() && !it->second.empty() ? it->second : "-");
    }
    md += "\n";
  }
  return md + "\n";
}

// One stage's section: where and when it ran, its evaluations, its options.
std::string stage_section(const Stage& s) {
  std::string md = fmt::format("## {}: {}\n\n", s.stage.empty() ? "run" : s.stage, s.dir);
  Rows when;
  if (s.run.is_object() && s.run.contains("created_unix") && s.run["created_unix"].is_number_integer())
    when.emplace_back("started", utc_time(s.run["created_unix"].get<int64_t>()));
  if (s.metrics_time > 0) when.emplace_back("last logged", utc_time(s.metrics_time));
  if (s.run.is_object()) when.emplace_back("run id", s.run.value("run_id", ""));
  if (s.meta.is_object()) {
    when.emplace_back("newest checkpoint", fmt::format("step {}", s.meta.value("step", int64_t{-1})));
    when.emplace_back("world size", fmt::format("{}", s.meta.value("world_size", 0)));
  }
  md += markdown_table(when);
  if (!s.evals.empty()) {
    md += "### Evaluations\n\n| task | accuracy | correct | pass@k | problems | samples each | when |\n"
          "|---|---|---|---|---|---|---|\n";
    for (const auto& e : s.evals) {
      md += fmt::format("| {} | {:.4f} | {}/{} | {:.4f} | {} | {} | {} |\n", e.value("task", std::string("?")),
                        number(e, "accuracy"), e.value("correct", int64_t{0}), e.value("n", int64_t{0}),
                        number(e, "pass_at_k"), e.value("problems", int64_t{0}), e.value("num_samples", int64_t{1}),
                        e.contains("time_unix") ? utc_time(e.value("time_unix", int64_t{0})) : "");
    }
    md += "\n";
  }
  const Rows options = stage_options(s.meta.is_object() ? s.meta.value("options", nlohmann::json()) : nlohmann::json(),
                                     s.stage);
  if (!options.empty()) md += "### Options\n\n" + markdown_table(options);
  return md;
}

}  // namespace

void write_pipeline_report(const std::vector<std::string>& runs, const std::string& out) {
  std::vector<Stage> stages;
  for (const auto& dir : runs) stages.push_back(read_stage(dir));
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  std::string md = fmt::format("# nanoddp report\n\nGenerated {} across {} stage{}.\n\n", utc_time(now), stages.size(),
                               stages.size() == 1 ? "" : "s");
  // The machine, once: the first stage that recorded it.
  for (const auto& s : stages) {
    const nlohmann::json env = read_json(fs::path(s.dir) / "environment.json");
    if (!env.is_object()) continue;
    Rows rows;
    for (auto it = env.begin(); it != env.end(); ++it)
      rows.emplace_back(it.key(), it->is_string() ? it->get<std::string>() : it->dump());
    md += "## Environment (" + s.dir + ")\n\n" + markdown_table(rows);
    break;
  }
  md += "## Summary\n\n" + summary_table(stages);
  for (const auto& s : stages) md += stage_section(s);
  write_file_atomically(out, md);
}

}  // namespace nanoddp::train
