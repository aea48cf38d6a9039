// `nanoddp report` (train/report.h): the chart renderer's ticks and geometry, and a report written
// from a real run folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "test_util.h"
#include "train/report.h"
#include "train_test_util.h"

namespace nanoddp {
namespace {

using train::nice_ticks;

// Ticks are compared within 1e-12 relative: they are multiples of a step like 0.2, which binary
// floating point holds only approximately.
void expect_ticks(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::abs(want[i])));
}

TEST(Report, TicksAreRoundNumbersInsideTheRange) {
  expect_ticks(nice_ticks(0, 1, 5), {0, 0.2, 0.4, 0.6, 0.8, 1});
  expect_ticks(nice_ticks(3, 97, 5), {20, 40, 60, 80});
  expect_ticks(nice_ticks(4096, 163840, 6), {50000, 100000, 150000});
  expect_ticks(nice_ticks(-1, 1, 4), {-1, -0.5, 0, 0.5, 1});
  expect_ticks(nice_ticks(2, 2, 5), {2, 2});  // degenerate: the ends
  EXPECT_EQ(train::short_number(163840), "163.84k");
  EXPECT_EQ(train::short_number(2.5e6), "2.5M");
  EXPECT_EQ(train::short_number(0.75), "0.75");
}

TEST(Report, PlotMapsDataToTheFrameAndEscapesText) {
  // Two points spanning the data range land on the frame's left and right edges (x) and 5% inside
  // its top and bottom (y, padded by 5% of the range each way). Frame: x 64..624, y 34..314.
  train::PlotSpec spec{"a < b & c", "x", "y", {{"s1", {{0, 0}, {10, 1}}}, {"s2", {{5, 0.5}}}}};
  const std::string svg = train::svg_line_plot(spec, 640, 360);
  EXPECT_TRUE(svg.starts_with("<svg ")) << svg;
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
  EXPECT_EQ(svg.find("a < b"), std::string::npos);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("points=\"([^\"]*)\"")));
  // y: range [0,1] padded to [-0.05, 1.05]; y=0 -> 34 + 1.05/1.1*280 = 301.3, y=1 -> 34 + 0.05/1.1*280 = 46.7.
  EXPECT_EQ(m[1].str(), "64.0,301.3 624.0,46.7");
  // One polyline and one legend entry per series.
  const auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t p = svg.find(what); p != std::string::npos; p = svg.find(what, p + 1)) n++;
    return n;
  };
  EXPECT_EQ(count("<polyline"), 2u);
  EXPECT_EQ(count(">s1</text>"), 1u);
  EXPECT_EQ(count(">s2</text>"), 1u);
}

TEST(Report, WrittenFromARunFolderWithEveryPlot) {
  testing::ScratchDir out("report_run");
  auto o = tiny(out.str());
  o.num_iterations = 6;
  o.eval_every = 3;
  train_single(o);
  const auto f = train::write_report(out.str());
  EXPECT_EQ(f.svgs.size(), 5u);  // loss, bpb, lr, throughput, time
  for (const auto& s : f.svgs) EXPECT_TRUE(std::filesystem::exists(s)) << s;
  std::ifstream html(f.html), md(f.markdown);
  const std::string h((std::istreambuf_iterator<char>(html)), {}), m((std::istreambuf_iterator<char>(md)), {});
  EXPECT_EQ(std::count(h.begin(), h.end(), '\n') > 10, true);
  for (const char* want : {"Validation bits per byte", "best val bpb", "depth", "backend", "<svg"})
    EXPECT_NE(h.find(want), std::string::npos) << want;
  EXPECT_NE(m.find("![Loss](report/loss.svg)"), std::string::npos) << m;
  // An evaluation that was not finite is logged as null: the report skips it for the best. Was: a
  // "malformed JSON" error, on the run a user most wants a report of.
  std::ofstream(out.str("metrics.jsonl"), std::ios::app) << "{\"step\": 7, \"val_loss\": null, \"val_bpb\": null}\n";
  const auto g = train::write_report(out.str());
  std::ifstream md2(g.markdown);
  const std::string m2((std::istreambuf_iterator<char>(md2)), {});
  EXPECT_NE(m2.find("best val bpb"), std::string::npos) << m2;
  EXPECT_EQ(m2.find("best val bpb | nan"), std::string::npos) << m2;
  // A folder without metrics is a clear error.
  testing::ScratchDir empty("report_empty");
  try {
    train::write_report(empty.str());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanoddp
