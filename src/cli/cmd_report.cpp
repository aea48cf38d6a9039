// nanoddp report RUN_DIR: the run's report card, HTML and Markdown with plots (train/report.h).
// nanoddp report BASE SFT RL (or a folder holding them): one report.md across the stages (Note
// [pipeline report] in train/report.h).
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "train/report.h"

namespace nanoddp::cli {

namespace {

namespace fs = std::filesystem;

// Where the pipeline report goes by default: the folder holding the runs (one given folder that
// holds them: that folder), else the runs' common parent.
std::string default_pipeline_out(const std::vector<std::string>& inputs, const std::vector<std::string>& runs) {
  if (inputs.size() == 1 && runs.size() >= 1 && runs[0] != inputs[0])
    return (fs::path(inputs[0]) / "report.md").string();
  fs::path common = fs::absolute(runs[0]).lexically_normal().parent_path();
  for (const auto& r : runs) {
    const fs::path p = fs::absolute(r).lexically_normal();
    while (!common.empty() && common != common.root_path() &&
           std::mismatch(common.begin(), common.end(), p.begin(), p.end()).first != common.end())
      common = common.parent_path();
  }
  return (common / "report.md").string();
}

}  // namespace

void add_report_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("report", "Write RUN_DIR/report.html and report.md (curves, throughput, time split, "
                                            "configuration, hardware and versions of a run); with several runs (base, "
                                            "sft, rl) or a folder holding them, one report.md across the stages");
  auto dirs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("run_dirs", *dirs,
                  "The --out folder of a train, sft or rl run; several of them, or a folder "
                  "holding them, for the report across the stages")
      ->required();
  cmd->add_option("--out", *out,
                  "The report across the stages: where to write it (default: report.md in the folder "
                  "holding the runs)");
  cmd->callback([dirs, out] {
    const bool one_run = dirs->size() == 1 && fs::exists(fs::path(dirs->front()) / "metrics.jsonl");
    if (one_run && out->empty()) {
      const train::ReportFiles f = train::write_report(dirs->front());
      fmt::print("wrote {} and {} ({} plots in {}/report/)\n", f.html, f.markdown, f.svgs.size(), dirs->front());
      return;
    }
    const auto runs = train::pipeline_runs(*dirs);
    const std::string path = out->empty() ? default_pipeline_out(*dirs, runs) : *out;
    train::write_pipeline_report(runs, path);
    fmt::print("wrote {}: {} stage{} ({})\n", path, runs.size(), runs.size() == 1 ? "" : "s", fmt::join(runs, ", "));
  });
}

}  // namespace nanoddp::cli
