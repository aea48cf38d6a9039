// nanoddp report RUN_DIR: the run's report card, HTML and Markdown with plots (train/report.h).
#include <fmt/format.h>

#include "cli/commands.h"
#include "train/report.h"

namespace nanoddp::cli {

void add_report_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("report", "Write RUN_DIR/report.html and report.md: curves, throughput, time "
                                            "split, configuration, hardware and versions of a run");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("run_dir", *dir, "The --out folder of a train, sft or rl run")->required();
  cmd->callback([dir] {
    const train::ReportFiles f = train::write_report(*dir);
    fmt::print("wrote {} and {} ({} plots in {}/report/)\n", f.html, f.markdown, f.svgs.size(), *dir);
  });
}

}  // namespace nanoddp::cli
