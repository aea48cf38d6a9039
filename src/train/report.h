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

}  // namespace nanoddp::train
