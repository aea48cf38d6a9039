#include "train/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "train/checkpoint.h"
#include "train/progress.h"

namespace nanoddp::train {

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo, hi};
  const double raw = (hi - lo) / std::max(1, target);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  // Multiples of step inside [lo, hi], tolerant of rounding at the ends.
  const double eps = step * 1e-9;
  // Each tick is k * step (not a running sum, whose rounding would grow along the axis).
  for (double k = std::ceil((lo - eps) / step); k * step <= hi + eps; k += 1)
    ticks.push_back(std::abs(k * step) < eps ? 0.0 : k * step);
  return ticks;
}

std::string short_number(double v) {
  const double a = std::abs(v);
  if (a >= 1e9) return fmt::format("{:g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Colour-blind-safe palette (Okabe and Ito's).
constexpr const char* kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};

}  // namespace

std::string svg_line_plot(const PlotSpec& spec, int width, int height) {
  const double left = 64, right = 16, top = 34, bottom = 46;
  const double pw = width - left - right, ph = height - top - bottom;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : spec.series) {
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  if (!(x0 <= x1)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;  // no data: empty axes
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * ph; };

  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" )"
                                R"(viewBox="0 0 {0} {1}" font-family="sans-serif" font-size="12">)"
                                "\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n", width, height);
  svg += fmt::format("<text x=\"{}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", left,
                     xml_escape(spec.title));
  for (double t : nice_ticks(x0, x1, 6)) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
                       px(t), top, top + ph, top + ph + 16, short_number(t));
  }
  for (double t : nice_ticks(y0, y1, 5)) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e4e4e4\"/>"
                       "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
                       left, py(t), left + pw, left - 6, py(t) + 4, short_number(t));
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", left,
                     top, pw, ph);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + pw / 2, height - 8,
                     xml_escape(spec.x_label));
  svg += fmt::format("<text transform=\"translate(14 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     top + ph / 2, xml_escape(spec.y_label));
  for (size_t i = 0; i < spec.series.size(); i++) {
    const auto& s = spec.series[i];
    const char* colour = kColours[i % std::size(kColours)];
    std::string points;
    for (auto [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    if (!points.empty()) points.pop_back();
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>\n", colour, points);
    // Legend, top right, one row per series.
    const double ly = top + 14 + 16 * static_cast<double>(i);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
                       "stroke-width=\"2\"/><text x=\"{4:.1f}\" y=\"{5:.1f}\" text-anchor=\"end\">{6}</text>\n",
                       left + pw - 26, ly, left + pw - 8, colour, left + pw - 30, ly + 4, xml_escape(s.label));
  }
  svg += "</svg>\n";
  return svg;
}

namespace {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

// A value of a training line by key, or NaN when the line has none.
double field(const nlohmann::json& line, const char* key) {
  return line.contains(key) && line[key].is_number() ? line[key].get<double>() : NAN;
}

// "key | value" rows of a flat JSON object.
std::vector<std::pair<std::string, std::string>> rows_of(const nlohmann::json& j) {
  std::vector<std::pair<std::string, std::string>> rows;
  if (!j.is_object()) return rows;
  for (auto it = j.begin(); it != j.end(); ++it)
    rows.emplace_back(it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  return rows;
}

// The lines of metrics.jsonl, split into training steps and evaluations, and the x axis they share:
// tokens seen where the run counts them (base, SFT), else steps (RL).
struct Metrics {
  std::vector<nlohmann::json> train, evals;
  bool rl = false, by_tokens = false;
  double tokens_per_step = 1;
  std::string x_label;
  double x_of(const nlohmann::json& j) const { return field(j, "step") * tokens_per_step; }
  Series series(const std::vector<nlohmann::json>& lines, const char* key, const std::string& label) const {
    Series s{label, {}};
    for (const auto& j : lines) s.points.emplace_back(x_of(j), field(j, key));
    return s;
  }
};

Metrics read_metrics(const std::string& run_dir) {
  const std::string metrics_path = run_dir + "/metrics.jsonl";
  std::ifstream in(metrics_path);
  NANODDP_CHECK(in.good(), "no {}: give the --out folder of a train, sft or rl run", metrics_path);
  Metrics m;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    line_no++;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      NANODDP_FAIL("{}:{} is not JSON: the file is corrupt", metrics_path, line_no);
    }
    (j.contains("val_bpb") ? m.evals : m.train).push_back(j);
  }
  NANODDP_CHECK(!m.train.empty(), "{} has no training steps yet", metrics_path);
  m.rl = m.train.front().contains("reward");
  m.by_tokens = m.train.front().contains("tokens");
  m.tokens_per_step = m.by_tokens ? field(m.train.front(), "tokens") / field(m.train.front(), "step") : 1;
  m.x_label = m.by_tokens ? "tokens" : "step";
  return m;
}

// The plots of the report, each with the file stem of its SVG.
std::vector<std::pair<std::string, PlotSpec>> report_plots(const Metrics& m) {
  const auto& train = m.train;
  const auto& evals = m.evals;
  const std::string& x_label = m.x_label;
  std::vector<std::pair<std::string, PlotSpec>> plots;
  plots.push_back({"loss", {"Loss", x_label, "nats", {m.series(train, "loss", "train"), m.series(evals, "val_loss", "val")}}});
  if (!evals.empty()) plots.push_back({"bpb", {"Validation bits per byte", x_label, "bpb", {m.series(evals, "val_bpb", "val")}}});
  if (m.rl) plots.push_back({"reward", {"Mean reward", x_label, "reward", {m.series(train, "reward", "reward")}}});
  plots.push_back({"lr", {"Learning-rate multiplier", x_label, "lrm", {m.series(train, "lrm", "lrm")}}});
  plots.push_back({"throughput", {m.rl ? "Sampling throughput" : "Throughput", x_label, "tokens/s",
                                  {m.series(train, m.rl ? "sample_tokens_per_s" : "tokens_per_s", "tokens/s")}}});
  PlotSpec time{"Where each step's time went (rank 0)", x_label, "ms", {}};
  for (const char* key : {"data_ms", "sample_ms", "forward_ms", "backward_ms", "comm_ms", "optimizer_ms", "dt_ms"})
    if (train.back().contains(key)) time.series.push_back(m.series(train, key, key));
  if (!time.series.empty()) plots.push_back({"time", time});
  return plots;
}

// The numbers of the run: steps, time, losses, the best evaluation, reward and MFU.
std::vector<std::pair<std::string, std::string>> report_summary(const Metrics& m) {
  const auto& last = m.train.back();
  double seconds = 0;
  for (const auto& j : m.train) seconds += std::isfinite(field(j, "dt_ms")) ? field(j, "dt_ms") / 1000 : 0;
  std::vector<std::pair<std::string, std::string>> summary = {
      {"steps", fmt::format("{}", field(last, "step"))},
      {"training time (steps only)", format_duration(seconds)},
      {"last training loss", fmt::format("{:.4f}", field(last, "loss"))}};
  if (m.by_tokens) summary.emplace_back("tokens", short_number(field(last, "tokens")));
  if (!m.evals.empty()) {
    // A non-finite evaluation is logged as null (JSON has no NaN): it is never the best.
    auto bpb = [](const nlohmann::json& j) {
      const double v = field(j, "val_bpb");
      return std::isfinite(v) ? v : INFINITY;
    };
    const auto best = std::min_element(m.evals.begin(), m.evals.end(),
                                       [&](const auto& a, const auto& b) { return bpb(a) < bpb(b); });
    summary.emplace_back("best val bpb", fmt::format("{:.4f} (step {})", field(*best, "val_bpb"), field(*best, "step")));
    summary.emplace_back("last val bpb", fmt::format("{:.4f}", field(m.evals.back(), "val_bpb")));
  }
  if (m.rl) summary.emplace_back("last mean reward", fmt::format("{:.4f}", field(last, "reward")));
  if (last.contains("mfu")) summary.emplace_back("last MFU", fmt::format("{:.1f}%", 100 * field(last, "mfu")));
  return summary;
}

// What the newest checkpoint says of the run: its options, its model and its provenance (all empty
// without a checkpoint).
struct CheckpointFacts {
  nlohmann::json options, model, versions;
};

CheckpointFacts read_checkpoint_facts(const std::string& run_dir) {
  CheckpointFacts facts;
  if (auto step = latest_checkpoint(run_dir)) {
    const nlohmann::json meta = read_checkpoint_meta(checkpoint_dir(run_dir, *step));
    facts.options = meta.value("options", nlohmann::json::object());
    facts.model = meta.value("model_config", nlohmann::json::object());
    facts.versions = {{"nanoddp", meta.value("nanoddp_version", "")}, {"stage", meta.value("stage", "")},
                      {"world size", meta.value("world_size", 0)}, {"newest checkpoint", checkpoint_dir(run_dir, *step)}};
  }
  return facts;
}

// The report written twice as it grows: Markdown, and HTML with the SVGs inline.
struct ReportText {
  std::string md, html;

  explicit ReportText(const std::string& run_dir) {
    md = fmt::format("# nanoddp report: {}\n\n", run_dir);
    html = fmt::format("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>nanoddp report: {0}"
                       "</title><style>body{{font-family:sans-serif;max-width:1340px;margin:24px auto;}}"
                       "table{{border-collapse:collapse;margin:8px 0 20px}}td,th{{border:1px solid #ccc;"
                       "padding:3px 8px;text-align:left;font-size:13px}}.plots svg{{margin:6px}}</style>"
                       "</head><body>\n<h1>nanoddp report: {0}</h1>\n", xml_escape(run_dir));
  }

  void table(const std::string& title, const std::vector<std::pair<std::string, std::string>>& rows) {
    if (rows.empty()) return;
    md += fmt::format("## {}\n\n| | |\n|---|---|\n", title);
    html += fmt::format("<h2>{}</h2><table>\n", xml_escape(title));
    for (const auto& [k, v] : rows) {
      md += fmt::format("| {} | {} |\n", k, v);
      html += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", xml_escape(k), xml_escape(v));
    }
    md += "\n";
    html += "</table>\n";
  }

  // Each plot written to report/<stem>.svg, linked from the Markdown and inline in the HTML.
  void plots(const std::string& run_dir, const std::vector<std::pair<std::string, PlotSpec>>& plots,
             std::vector<std::string>& svg_paths) {
    html += "<h2>Plots</h2><div class=\"plots\">\n";
    md += "## Plots\n\n";
    for (const auto& [stem, spec] : plots) {
      const std::string svg = svg_line_plot(spec);
      const std::string path = run_dir + "/report/" + stem + ".svg";
      write_file_atomically(path, svg);
      svg_paths.push_back(path);
      html += svg;
      md += fmt::format("![{}](report/{}.svg)\n\n", spec.title, stem);
    }
    html += "</div>\n";
  }
};

// run.json's rows, its start time written as a date.
std::vector<std::pair<std::string, std::string>> run_rows(const nlohmann::json& run) {
  auto rows = rows_of(run);
  for (auto& [k, v] : rows)
    if (k == "created_unix" && run["created_unix"].is_number_integer())
      std::tie(k, v) = std::pair<std::string, std::string>("started", utc_time(run["created_unix"].get<int64_t>()));
  return rows;
}

}  // namespace

ReportFiles write_report(const std::string& run_dir) {
  const Metrics metrics = read_metrics(run_dir);
  const CheckpointFacts facts = read_checkpoint_facts(run_dir);
  const nlohmann::json environment = read_json_file(run_dir + "/environment.json");
  const nlohmann::json run = read_json_file(run_dir + "/run.json");

  ReportFiles files{run_dir + "/report.html", run_dir + "/report.md", {}};
  std::filesystem::create_directories(run_dir + "/report");
  ReportText text(run_dir);
  text.table("Summary", report_summary(metrics));
  text.plots(run_dir, report_plots(metrics), files.svgs);
  text.table("Run", run_rows(run));
  text.table("Checkpoint", rows_of(facts.versions));
  text.table("Hardware and versions", rows_of(environment));
  text.table("Model", rows_of(facts.model));
  text.table("Options", stage_options(facts.options, facts.versions.is_object() ? facts.versions.value("stage", "") : ""));
  text.html += "</body></html>\n";
  write_file_atomically(files.markdown, text.md);
  write_file_atomically(files.html, text.html);
  return files;
}

}  // namespace nanoddp::train
