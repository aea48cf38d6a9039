// `nanoddp report RUN_DIR`: a run's report card (nanochat's report.md, with plots): the training
// and validation curves against tokens, the learning-rate schedule, throughput, where each step's
// time went, the configuration, hardware and versions. Written as RUN_DIR/report.html (one
// self-contained file, plots inline) and RUN_DIR/report.md with the plots beside it as
// RUN_DIR/report/*.svg.
//
// The plots are drawn by svg_line_plot below: a small renderer of line charts, not a dependency.
// Debian has no C++ plotting library, and a chart of a few series needs only scaled polylines,
// "nice" ticks and a legend; tests/train/test_report.cpp checks its geometry.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace nanoddp::train {

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite ys are skipped
};

struct PlotSpec {
  std::string title, x_label, y_label;
  std::vector<Series> series;
};

// Tick values covering [lo, hi]: multiples of 1, 2 or 5 x 10^k, about `target` of them, all inside
// the range (at least the two ends when the range is degenerate).
std::vector<double> nice_ticks(double lo, double hi, int target);

// "1.5M", "250k", "0.75": short labels for ticks.
std::string short_number(double v);

// An SVG line chart, width x height pixels: one polyline per series, axes with nice ticks and grid
// lines, a legend. Text is XML-escaped.
std::string svg_line_plot(const PlotSpec& spec, int width = 640, int height = 360);

struct ReportFiles {
  std::string html, markdown;
  std::vector<std::string> svgs;
};

// Reads RUN_DIR/metrics.jsonl, run.json, environment.json and the newest checkpoint's meta.json and
// writes the report. Throws nanoddp::Error when RUN_DIR has no metrics.jsonl.
ReportFiles write_report(const std::string& run_dir);

// Note [pipeline report]: `nanoddp report BASE SFT RL` (or a folder holding them) writes one
// report.md across the stages, as nanochat's report.md covers its whole pipeline: when each stage
// ran (dates, not Unix seconds), a summary table with one column per stage (steps, tokens, time,
// losses, bits per byte, reward, and the accuracy of every `nanoddp eval` of the stage), then per
// stage its evaluations and its own options (a base run lists no RL or chat options). Evaluations
// reach it through record_eval: `nanoddp eval` appends its result to the run folder.

// Appends an evaluation's result, with the time, to RUN/evals.jsonl of the run folder that holds
// checkpoint directory `checkpoint` (RUN/checkpoints/step_N), or to the checkpoint directory itself
// when it is not in a run folder. Returns the file written.
std::string record_eval(const std::string& checkpoint, const nlohmann::json& result);

// The run folders of `inputs`: each input that holds metrics.jsonl, or else the folders directly
// inside it that do (base, then sft, then rl, then others by name). Throws nanoddp::Error naming
// an input that is neither.
std::vector<std::string> pipeline_runs(const std::vector<std::string>& inputs);

// Writes the report of Note [pipeline report] across `runs` (in that order) to `out`.
void write_pipeline_report(const std::vector<std::string>& runs, const std::string& out);

// "2026-11-27 13:40:12 UTC".
std::string utc_time(int64_t unix_seconds);

// The options (a checkpoint's "options") that belong to a stage: a base run's without the RL and
// chat options, an SFT run's without the RL ones, an RL run's without the chat ones; unset
// (empty) ones left out everywhere. "option | value" rows in the options' order.
std::vector<std::pair<std::string, std::string>> stage_options(const nlohmann::json& options,
                                                               const std::string& stage);

}  // namespace nanoddp::train
