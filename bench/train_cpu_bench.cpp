// Single-process CPU training throughput: nanoddp against PyTorch 1.13 (Debian's python3-torch,
// tools/torch_train_bench.py) on the same model, batch and thread count, measured in one run, in
// f32 and in bf16 (ours: --dtype bf16; PyTorch: torch.autocast("cpu", bfloat16)).
// The model is the one PyTorch 1.13 was measured on in docs/benchmarks.md: nanochat's GPT at depth 4 (model_dim 256, 2 heads), vocab 4096,
// T 128, batch 16. Prints tokens/s, MFU against the sgemm peak measured here, the share of the
// step spent in GEMMs and the GEMMs' own rate.
// MFU is against the GEMM peak of the row's dtype, measured here.
// The dtypes of one thread count are timed in turns, a block of steps each, so that the machine's
// drift (this project's shared machines swing by 1.5x within minutes) falls on every dtype alike
// and the "vs fp32" ratio compares like with like; each dtype's GEMM peak is the best of its turns.
// PyTorch runs in its own process after ours, so drift between the two falls on the nanoddp /
// PyTorch ratio: --rounds N repeats the pair N times and prints, per row, the median of the rounds'
// figures and ratios (each ratio taken within its round) and every round's ratio.
//   build/bench/bench_train_cpu --threads 1,2 --optimizer adamw --dtype fp32,bf16 [--rounds 3]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "comm/process_group.h"
#include "core/timer.h"
#include "ops/backend.h"
#include "ops/ops.h"
#include "ops/profile.h"
#include "step_harness.h"

namespace {

using namespace nanoddp;

struct Args {
  std::vector<int> threads{1, 2};
  int depth = 4, vocab = 4096, seq = 128, batch = 16, steps = 20, warmup = 3;
  std::string optimizer = "adamw";
  std::vector<std::string> dtypes{"fp32", "bf16"};
  bool torch = true;
  bool breakdown = false;
  int rounds = 1;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The best GEMM rate over the model's GEMM shapes (the MFU denominator), at the current threads,
// with operands of type t (f32, or bf16 into f32).
double gemm_peak(DType t) {
  const int64_t shapes[][3] = {{2048, 256, 256}, {2048, 1024, 256}, {2048, 4096, 256}, {1024, 1024, 1024}};
  double best = 0;
  for (auto& s : shapes) {
    Tensor a = Tensor::zeros({s[0], s[2]}, t), b = Tensor::zeros({s[1], s[2]}, t),
           c = Tensor::zeros({s[0], s[1]}, DType::F32);
    ops::fill(a, 0.5f);
    ops::fill(b, 0.25f);
    for (int i = 0; i < 6; i++) {
      Stopwatch sw;
      ops::matmul(c, a, false, b, true);
      best = std::max(best, 2.0 * s[0] * s[1] * s[2] / sw.seconds());
    }
  }
  return best;
}

struct Result {
  double tokens_per_s = 0, matmul_share = 0, matmul_flops_per_s = 0, peak = 0;
};

// One dtype's model, stepped in turns with the others; what its timed blocks added up to.
struct Contender {
  DType act;
  std::unique_ptr<bench::StepBench> bench;
  double seconds = 0, peak = 0;
  int steps = 0;
  std::map<std::string, ops::OpStats> stats, detail;
};

void add_stats(std::map<std::string, ops::OpStats>& into, const std::map<std::string, ops::OpStats>& from) {
  for (const auto& [name, s] : from) into[name] += s;
}

// Every dtype at the current threads: warm-up, then `turns` rounds in which each dtype times a
// block of its steps and measures its GEMM peak (fp16's GEMMs run in f32, f16 operands widened:
// its peak is f32's).
std::vector<Result> run_nanoddp(const Args& a, const std::vector<DType>& acts) {
  auto group = dist::make_single_rank_group(Device::cpu());
  std::vector<Contender> cs;
  for (DType act : acts) {
    cs.push_back(Contender{.act = act,
                           .bench = std::make_unique<bench::StepBench>(
                               bench::StepBenchConfig{.depth = a.depth, .vocab = a.vocab, .seq = a.seq,
                                                      .batch = a.batch, .act_dtype = act,
                                                      .optimizer = parse_option<ddp::OptimizerKind>(a.optimizer, "--optimizer")},
                               *group),
                           .stats = {},
                           .detail = {}});
    for (int i = 0; i < a.warmup; i++) cs.back().bench->step();
  }
  const int turns = std::min(a.steps, 5);
  for (int turn = 0; turn < turns; turn++) {
    for (Contender& c : cs) {
      c.peak = std::max(c.peak, gemm_peak(c.act == DType::F16 ? DType::F32 : c.act));
      const int steps = a.steps / turns + (turn < a.steps % turns ? 1 : 0);
      ops::reset_profile();
      ops::set_profiling(true);
      Stopwatch sw;
      for (int i = 0; i < steps; i++) c.bench->step();
      c.seconds += sw.seconds();
      ops::set_profiling(false);
      c.steps += steps;
      add_stats(c.stats, ops::profile_snapshot());
      add_stats(c.detail, ops::profile_detail_snapshot());
    }
  }
  std::vector<Result> out;
  for (Contender& c : cs) {
    if (a.breakdown) {
      fmt::print("  {} at {} threads, {} steps:\n", dtype_name(c.act), ops::cpu_threads(), c.steps);
      bench::print_breakdown(stdout, c.stats, c.steps, c.seconds, c.detail);
    }
    Result r;
    r.peak = c.peak;
    r.tokens_per_s = double(a.batch) * a.seq * c.steps / c.seconds;
    r.matmul_share = c.stats["matmul"].seconds / c.seconds;
    r.matmul_flops_per_s = c.stats["matmul"].flops / c.stats["matmul"].seconds;
    out.push_back(r);
  }
  return out;
}

Result run_torch(const Args& a, int threads, const std::string& dtype) {
  const std::string cmd = fmt::format(
      "OMP_NUM_THREADS={0} /usr/bin/python3 {1}/tools/torch_train_bench.py --depth {2} --vocab {3} --seq {4} "
      "--batch {5} --steps {6} --warmup {7} --threads {0} --optimizer {8} --dtype {9} 2>&1",
      threads, NANODDP_SOURCE_DIR, a.depth, a.vocab, a.seq, a.batch, a.steps, a.warmup, a.optimizer, dtype);
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (!p || pclose(p) != 0) {
    fmt::print(stderr, "PyTorch run failed (is python3-torch installed? scripts/setup.sh installs it):\n{}\n", out);
    return {};
  }
  auto j = nlohmann::json::parse(out.substr(out.rfind('{')));
  return {j["tokens_per_s"].get<double>(), 0, 0, 0};
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"nanoddp vs PyTorch 1.13: one-process CPU training throughput"};
  app.add_option("--threads", a.threads, "Thread counts to measure")->delimiter(',');
  app.add_option("--depth", a.depth);
  app.add_option("--vocab", a.vocab);
  app.add_option("--seq", a.seq);
  app.add_option("--batch", a.batch);
  app.add_option("--steps", a.steps, "Timed steps");
  app.add_option("--warmup", a.warmup, "Untimed steps first");
  app.add_option("--optimizer", a.optimizer, "adamw (AdamW everywhere) or muon (nanochat: Muon + AdamW)");
  app.add_option("--dtype", a.dtypes, "Activation dtypes to measure: fp32, bf16, fp16")->delimiter(',');
  app.add_flag("!--no-torch", a.torch, "Skip the PyTorch baseline");
  app.add_flag("--breakdown", a.breakdown, "Print the time of every op");
  app.add_option("--rounds", a.rounds, "Measure ours then PyTorch this many times; print the medians")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  for (const auto& d : a.dtypes)
    if (d != "fp32" && d != "bf16" && d != "fp16") {
      fmt::print(stderr, "--dtype: {} is not fp32, bf16 or fp16\n", d);
      return 2;
    }
  const auto config = model::GPTConfig::from_depth(a.depth, a.vocab, a.seq);
  const double flops_per_token = config.flops_per_token(a.seq);
  fmt::print("model: depth {} dim {} vocab {} T {} B {} ({:.2f}M params, {:.1f} MFLOP/token), optimizer {}\n",
             a.depth, config.n_embd, a.vocab, a.seq, a.batch, config.num_params() / 1e6, flops_per_token / 1e6,
             a.optimizer);
  fmt::print("{:>7} | {:>5} | {:>12} | {:>13} | {:>8} | {:>6} | {:>10} | {:>9} | {:>13} | {:>10}\n", "threads", "dtype",
             "GEMM peak", "nanoddp tok/s", "MFU", "GEMM %", "GEMM/peak", "vs fp32", "PyTorch tok/s", "nanoddp/PT");
  for (int t : a.threads) {
    ops::set_cpu_threads(t);
    std::vector<DType> acts;
    for (const auto& d : a.dtypes) acts.push_back(d == "bf16" ? DType::BF16 : d == "fp16" ? DType::F16 : DType::F32);
    // Per dtype, one entry per round: ours, PyTorch's (0: none) and the two ratios.
    struct Rounds {
      std::vector<double> tokens, peak, mfu, share, gemm_rate, vs_fp32, theirs, vs_torch;
    };
    std::vector<Rounds> rounds(acts.size());
    for (int round = 0; round < a.rounds; round++) {
      const std::vector<Result> ours = run_nanoddp(a, acts);
      double fp32_tokens = 0;
      for (size_t i = 0; i < acts.size(); i++)
        if (acts[i] == DType::F32) fp32_tokens = ours[i].tokens_per_s;
      for (size_t i = 0; i < acts.size(); i++) {
        const std::string& d = a.dtypes[i];
        const Result& r = ours[i];
        Rounds& rs = rounds[i];
        rs.tokens.push_back(r.tokens_per_s);
        rs.peak.push_back(r.peak);
        rs.mfu.push_back(flops_per_token * r.tokens_per_s / r.peak);
        rs.share.push_back(r.matmul_share);
        rs.gemm_rate.push_back(r.matmul_flops_per_s / r.peak);
        if (fp32_tokens > 0) rs.vs_fp32.push_back(r.tokens_per_s / fp32_tokens);
        // PyTorch 1.13 has no fp16 autocast on the CPU: no baseline for fp16.
        const Result theirs = a.torch && d != "fp16" ? run_torch(a, t, d) : Result{};
        if (theirs.tokens_per_s > 0) {
          rs.theirs.push_back(theirs.tokens_per_s);
          rs.vs_torch.push_back(r.tokens_per_s / theirs.tokens_per_s);
        }
      }
    }
    for (size_t i = 0; i < acts.size(); i++) {
      const Rounds& rs = rounds[i];
      const bool baseline = !rs.vs_torch.empty();
      fmt::print("{:>7} | {:>5} | {:>7.1f} GF/s | {:>13.0f} | {:>7.1f}% | {:>5.1f}% | {:>9.1f}% | {:>9} | {:>13} | {:>10}\n",
                 t, a.dtypes[i], median(rs.peak) / 1e9, median(rs.tokens), 100 * median(rs.mfu), 100 * median(rs.share),
                 100 * median(rs.gemm_rate), rs.vs_fp32.empty() ? "-" : fmt::format("{:.2f}x", median(rs.vs_fp32)),
                 baseline ? fmt::format("{:.0f}", median(rs.theirs)) : "-",
                 baseline ? fmt::format("{:.2f}x", median(rs.vs_torch)) : "-");
      if (a.rounds > 1 && baseline) {
        std::string each;
        for (double x : rs.vs_torch) each += fmt::format("{}{:.2f}x", each.empty() ? "" : " ", x);
        fmt::print("{:>7}   {:>5}   nanoddp/PT in each of {} rounds: {}\n", "", "", a.rounds, each);
      }
    }
  }
  return 0;
}
