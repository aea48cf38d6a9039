// `nanoddp report` (train/report.h): the chart renderer's ticks and geometry, and a report written
// from a real run folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "train/checkpoint.h"
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
  o.batch.num_iterations = 6;
  o.eval.eval_every = 3;
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
  // Dates are readable, and a base run lists no RL options.
  EXPECT_EQ(m.find("created_unix"), std::string::npos) << m;
  EXPECT_TRUE(std::regex_search(m, std::regex(R"(\| started \| 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC \|)"))) << m;
  EXPECT_EQ(m.find("| num_samples |"), std::string::npos) << m;
  EXPECT_NE(m.find("| depth | 2 |"), std::string::npos) << m;
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

// The text of `md` from the line starting with `from` to the next "## " heading.
std::string section(const std::string& md, const std::string& from) {
  const size_t begin = md.find(from);
  if (begin == std::string::npos) return "";
  const size_t end = md.find("\n## ", begin + 1);
  return md.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// Turns a copy of a base run into a stage of another kind: its checkpoint's stage and options, as
// `nanoddp sft` and `nanoddp rl` record them (what the report reads; the weights do not matter here).
void make_stage(const std::string& dir, const std::string& stage, const nlohmann::json& options) {
  const std::string meta_path = train::checkpoint_dir(dir, *train::latest_checkpoint(dir)) + "/meta.json";
  nlohmann::json meta = nlohmann::json::parse(testing::read_file(meta_path));
  meta["stage"] = stage;
  meta["options"]["stage"] = stage;
  for (auto it = options.begin(); it != options.end(); ++it) meta["options"][it.key()] = it.value();
  std::ofstream(meta_path) << meta.dump();
}

TEST(Report, AcrossStagesWithEvaluationsDatesAndEachStagesOptions) {
  namespace fs = std::filesystem;
  testing::ScratchDir root("report_pipeline");
  // Named so that their order by name is not the pipeline's.
  const std::string base = root.str("c_base"), sft = root.str("a_sft"), rl = root.str("b_rl");
  auto o = tiny(base);
  o.batch.num_iterations = 4;
  o.eval.eval_every = 2;
  train_single(o);
  fs::copy(base, sft, fs::copy_options::recursive);
  fs::copy(base, rl, fs::copy_options::recursive);
  make_stage(sft, "sft", {{"conversations", "chat.jsonl"}, {"mask", "assistant"}});
  make_stage(rl, "rl", {{"task", "arith_q.jsonl"}, {"num_samples", 4}, {"conversations", ""}});
  std::ofstream(rl + "/metrics.jsonl", std::ios::app) << R"({"step": 5, "loss": 0.5, "reward": 0.25, "dt_ms": 10})" "\n";
  // What `nanoddp eval --checkpoint RUN` records (the checkpoint directory inside the run folder).
  auto eval = [](const std::string& run, double accuracy) {
    const std::string ck = train::checkpoint_dir(run, *train::latest_checkpoint(run));
    const nlohmann::json result{{"task", "/data/arith_test.jsonl"}, {"accuracy", accuracy}, {"n", 100},
                                {"correct", static_cast<int>(accuracy * 100)}, {"pass_at_k", accuracy},
                                {"problems", 100}, {"num_samples", 1}, {"checkpoint", ck}};
    EXPECT_EQ(train::record_eval(ck, result), run + "/evals.jsonl");
  };
  eval(sft, 0.12);
  eval(rl, 0.20);
  eval(rl, 0.34);  // the newest evaluation of a task is the one the summary shows

  const auto runs = train::pipeline_runs({root.str()});
  EXPECT_EQ(runs, (std::vector<std::string>{base, sft, rl}));
  // Run folders named one by one are kept in the order given.
  EXPECT_EQ(train::pipeline_runs({rl, base}), (std::vector<std::string>{rl, base}));
  train::write_pipeline_report(runs, root.str("report.md"));
  const std::string md = testing::read_file(root.str("report.md"));
  EXPECT_NE(md.find("| metric | base | sft | rl |"), std::string::npos) << md;
  EXPECT_NE(md.find("| accuracy on arith_test.jsonl | - | 0.1200 | 0.3400 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| last mean reward | - | - | 0.2500 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("created_unix"), std::string::npos) << md;
  EXPECT_TRUE(std::regex_search(md, std::regex(R"(\| started \| 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC \|)"))) << md;
  EXPECT_TRUE(std::regex_search(md, std::regex(R"(arith_test.jsonl \| 0.3400 \| 34/100 \|.*UTC \|)"))) << md;
  // Each stage's own options.
  const std::string b = section(md, "## base:"), s = section(md, "## sft:"), r = section(md, "## rl:");
  for (const char* rl_or_chat : {"| task |", "| num_samples |", "| temperature |", "| conversations |", "| mask |"})
    EXPECT_EQ(b.find(rl_or_chat), std::string::npos) << rl_or_chat << " in the base run's options:\n" << b;
  EXPECT_NE(b.find("| depth | 2 |"), std::string::npos) << b;
  EXPECT_NE(s.find("| conversations | chat.jsonl |"), std::string::npos) << s;
  EXPECT_EQ(s.find("| num_samples |"), std::string::npos) << s;
  EXPECT_NE(r.find("| task | arith_q.jsonl |"), std::string::npos) << r;
  EXPECT_NE(r.find("| num_samples | 4 |"), std::string::npos) << r;
  EXPECT_EQ(r.find("| mask |"), std::string::npos) << r;

  // The command: a parent folder gets report.md inside it.
  fs::remove(root.str("report.md"));
  const auto cmd = testing::run_command(testing::nanoddp_binary() + " report " + root.str());
  ASSERT_EQ(cmd.status, 0) << cmd.output;
  EXPECT_TRUE(fs::exists(root.str("report.md"))) << cmd.output;
  // A folder without runs is one clear line.
  testing::ScratchDir empty("report_pipeline_empty");
  NANODDP_EXPECT_ERROR(train::pipeline_runs({empty.str()}), empty.str(), "holds no run");
}

}  // namespace
}  // namespace nanoddp
