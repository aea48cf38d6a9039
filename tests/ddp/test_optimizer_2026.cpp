// ddp::Optimizer's 2026 mode (Note [2026 optimizer] in ddp/optimizer.cpp) on a toy model that has
// every parameter kind of nanochat's current GPT: two steps against a slow reference written here
// in double; W ranks (replicated, split or not, --zero 1 and 2) against one rank accumulating the
// same W micro-batches, bit for bit, with small parameters sharded or replicated (Note [small
// parameters] in ddp/bucket_layout.h); and a resume from saved state, plain and resharded, bit for
// bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "comm/process_group.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "ddp_test_util.h"
#include "ops/ops.h"
#include "test_util.h"

namespace nanoddp {
namespace {

// A saved state as the optimizer takes it: every tensor of the file by name.
ddp::NamedTensors named(const SafetensorsFile& file) {
  ddp::NamedTensors out;
  for (const std::string& name : file.names()) out.emplace(name, file.read(name));
  return out;
}

using model::ParamKind;

struct Spec {
  const char* name;
  ParamKind kind;
  Shape shape;
};

// nanochat's names; two same-shape matrices (one Muon group), a tall and a wide one.
const std::vector<Spec>& specs() {
  static const std::vector<Spec> s = {
      {"transformer.wte.weight", ParamKind::Embedding, {12, 8}},
      {"transformer.h.0.attn.c_q.weight", ParamKind::Matrix, {8, 8}},
      {"transformer.h.0.mlp.c_fc.weight", ParamKind::Matrix, {16, 8}},
      {"transformer.h.0.mlp.c_proj.weight", ParamKind::Matrix, {8, 16}},
      {"transformer.h.1.attn.c_q.weight", ParamKind::Matrix, {8, 8}},
      {"lm_head.weight", ParamKind::LmHead, {12, 8}},
      {"value_embeds.1.weight", ParamKind::ValueEmbedding, {12, 8}},
      {"resid_lambdas", ParamKind::ResidLambda, {2}},
      {"x0_lambdas", ParamKind::X0Lambda, {2}},
      {"smear_gate.weight", ParamKind::Smear, {1, 4}},
      {"smear_lambda", ParamKind::Smear, {1}},
      {"backout_lambda", ParamKind::Smear, {1}},
  };
  return s;
}

class Toy final : public model::ParameterSet {
 public:
  Toy() {
    for (size_t i = 0; i < specs().size(); i++) {
      const Spec& s = specs()[i];
      Tensor data = Tensor::zeros(s.shape, DType::F32);
      for (int64_t j = 0; j < data.numel(); j++) data.data<float>()[j] = static_cast<float>(0.5 * std::cos(1.3 * j + i));
      params_.push_back({s.name, s.kind, data, Tensor::zeros(s.shape, DType::F32), Tensor()});
    }
  }
  std::vector<model::Parameter>& parameters() override { return params_; }
  double adamw_lr_scale() const override { return 0.5; }

 private:
  std::vector<model::Parameter> params_;
};

// Micro-batch i's gradient of parameter p at step s, element j. The tall matrix has a zero row and
// one of norm ~1e-6, as dead and barely active ReLU^2 units give, where the row equilibration's clamp
// (not an eps) decides the factor.
float grad_value(int s, int i, size_t p, int64_t j) {
  if (p == 2 && j < 8) return 0.f;
  if (p == 2 && j < 16) return static_cast<float>(5e-7 * std::sin(0.7 * j + 11.0 * s + 5.3 * i));
  return static_cast<float>(0.1 * std::sin(0.7 * j + 3.1 * p + 11.0 * s + 5.3 * i) + 0.01 * (j % 3));
}

struct StepArgs {
  double lrm, momentum, wd;
};
const StepArgs kSteps[] = {{0.7, 0.9, 0.2}, {1.0, 0.85, 0.1}, {0.5, 0.95, 0.05}};

ddp::OptimizerConfig config_2026() {
  ddp::OptimizerConfig oc;
  oc.recipe_2026 = true;
  oc.embedding_lr = 0.3;
  oc.unembedding_lr = 0.008;
  oc.matrix_lr = 0.02;
  oc.scalar_lr = 0.5;
  // f32 Polar Express: in bf16 a reduction-order change of the gradient moves the update by more
  // than the reference comparison could tell from a mistake.
  oc.ns_bf16 = false;
  return oc;
}

// ---- the slow reference, in double ----

using Mat = std::vector<double>;  // row-major

Mat matmul(const Mat& a, bool ta, const Mat& b, bool tb, int64_t m, int64_t n, int64_t k) {
  Mat c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t l = 0; l < k; l++)
        c[i * n + j] += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
  return c;
}

double frob(const Mat& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// nanochat's Muon direction after momentum: row equilibration, Polar Express, norm snap.
Mat direction(Mat x, int64_t r, int64_t c) {
  const double f = frob(x);
  for (int64_t i = 0; i < r; i++) {
    double n = 0;
    for (int64_t j = 0; j < c; j++) n += x[i * c + j] * x[i * c + j];
    const double k = f / std::sqrt(double(r)) / std::max(std::sqrt(n), 1e-6);
    for (int64_t j = 0; j < c; j++) x[i * c + j] *= k;
  }
  const double d = frob(x) * 1.01 + 1e-6;
  for (double& v : x) v /= d;
  const bool tall = r > c;
  const int64_t m = std::min(r, c);
  for (const auto& co : ops::kPolarExpressCoeffs) {
    const Mat a = tall ? matmul(x, true, x, false, m, m, r) : matmul(x, false, x, true, m, m, c);
    const Mat aa = matmul(a, false, a, false, m, m, m);
    Mat b(a.size());
    for (size_t i = 0; i < b.size(); i++) b[i] = co[1] * a[i] + co[2] * aa[i];
    const Mat xb = tall ? matmul(x, false, b, false, r, c, c) : matmul(b, false, x, false, r, c, r);
    for (size_t i = 0; i < x.size(); i++) x[i] = co[0] * x[i] + xb[i];
  }
  const double snap = std::sqrt(double(m)) / std::max(frob(x), 1e-6);
  for (double& v : x) v *= snap;
  return x;
}

struct RefState {
  Mat m, v;  // AdamW moments, or Muon's momentum and NorMuon's variance
};

void muon_ref(Mat& p, const Mat& g0, RefState& st, int64_t r, int64_t c, const StepArgs& a) {
  if (st.m.empty()) st = {Mat(p.size(), 0.0), Mat(static_cast<size_t>(r >= c ? r : c), 0.0)};
  Mat g = g0;
  for (size_t i = 0; i < g.size(); i++) {
    st.m[i] += (1 - a.momentum) * (g[i] - st.m[i]);
    g[i] += a.momentum * (st.m[i] - g[i]);
  }
  g = direction(g, r, c);
  // NorMuon: mean square per row (tall or square) or column (wide), its running mean, a step size
  // per row / column, then the whole update rescaled to the direction's norm.
  const bool per_row = r >= c;
  const int64_t k = per_row ? r : c, red = per_row ? c : r;
  Mat u(static_cast<size_t>(k), 0.0);
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++) u[per_row ? i : j] += g[i * c + j] * g[i * c + j] / double(red);
  double norm_sq = 0, new_sq = 0;
  Mat step(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; i++) {
    st.v[i] += (1 - 0.9) * (u[i] - st.v[i]);
    step[i] = 1 / std::sqrt(std::max(st.v[i], 1e-10));
    norm_sq += u[i] * double(red);
    new_sq += u[i] * double(red) * step[i] * step[i];
  }
  const double ratio = std::sqrt(norm_sq) / std::max(std::sqrt(new_sq), 1e-10);
  const double lr = 0.02 * a.lrm * std::sqrt(std::max(1.0, double(r) / double(c)));
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++) {
      const size_t e = static_cast<size_t>(i * c + j);
      const double gi = g[e] * step[per_row ? i : j] * ratio;
      p[e] -= lr * gi + (gi * p[e] >= 0 ? lr * a.wd * p[e] : 0.0);  // cautious weight decay
    }
}

// nanochat's AdamW groups (gpt.py setup_optimizer) with this test's lrs and adamw_lr_scale 0.5.
void adamw_ref(Mat& p, const Mat& g, RefState& st, ParamKind kind, int t, double lrm) {
  struct G {
    double lr, b1, b2, wd;
  };
  const G gr = kind == ParamKind::LmHead           ? G{0.008 * 0.5, 0.8, 0.96, 0.01}
               : kind == ParamKind::Embedding      ? G{0.3 * 0.5, 0.8, 0.995, 0.001}
               : kind == ParamKind::ValueEmbedding ? G{0.3 * 0.5 * 0.5, 0.8, 0.995, 0.01}
               : kind == ParamKind::ResidLambda    ? G{0.5 * 0.01, 0.8, 0.95, 0.05}
               : kind == ParamKind::X0Lambda       ? G{0.5, 0.96, 0.95, 0.0}
                                                   : G{0.2, 0.8, 0.95, 0.0};
  if (st.m.empty()) st = {Mat(p.size(), 0.0), Mat(p.size(), 0.0)};
  const double lr = gr.lr * lrm;
  for (size_t i = 0; i < p.size(); i++) {
    st.m[i] = gr.b1 * st.m[i] + (1 - gr.b1) * g[i];
    st.v[i] = gr.b2 * st.v[i] + (1 - gr.b2) * g[i] * g[i];
    const double mh = st.m[i] / (1 - std::pow(gr.b1, t)), vh = st.v[i] / (1 - std::pow(gr.b2, t));
    p[i] = p[i] * (1 - lr * gr.wd) - lr * mh / (std::sqrt(vh) + 1e-10);
  }
}

std::vector<std::vector<float>> params_of(Toy& toy) {
  std::vector<std::vector<float>> out;
  for (auto& p : toy.parameters()) out.push_back(testing::to_vector(p.data));
  return out;
}

// Sets this step's gradients (micro-batches `first` .. first + count - 1 added up, in order) and
// reports them to the reducer as the synchronised micro-step's.
void backward(Toy& toy, ddp::Reducer& reducer, int s, int first, int count, int micro_steps) {
  auto& ps = toy.parameters();
  for (int i = first; i < first + count; i++)
    for (size_t p = 0; p < ps.size(); p++)
      for (int64_t j = 0; j < ps[p].grad.numel(); j++)
        ps[p].grad.data<float>()[j] = (i == first ? 0.f : ps[p].grad.data<float>()[j]) + grad_value(s, i, p, j);
  auto hook = reducer.sync_hook(micro_steps);
  for (size_t p = ps.size(); p-- > 0;) hook(static_cast<int>(p));
  reducer.finish();
}

void step(ddp::Optimizer& opt, int s) {
  opt.set_muon_weight_decay(kSteps[s].wd);
  opt.step(kSteps[s].lrm, kSteps[s].momentum);
}

TEST(Optimizer2026, TwoStepsMatchTheSlowReference) {
  Toy toy;
  std::vector<Mat> want;
  for (auto& p : toy.parameters()) {
    const auto v = testing::to_vector(p.data);
    want.emplace_back(v.begin(), v.end());
  }
  auto group = dist::make_single_rank_group(Device::cpu());
  ddp::Reducer reducer(toy, *group, ddp::ReducerOptions{});
  ddp::Optimizer opt(toy, reducer, config_2026());
  std::vector<RefState> st(want.size());
  for (int s = 0; s < 2; s++) {
    backward(toy, reducer, s, 0, 1, 1);
    step(opt, s);
    for (size_t p = 0; p < want.size(); p++) {
      const Spec& sp = specs()[p];
      Mat g(want[p].size());
      for (size_t j = 0; j < g.size(); j++) g[j] = grad_value(s, 0, p, static_cast<int64_t>(j));
      if (sp.kind == ParamKind::Matrix)
        muon_ref(want[p], g, st[p], sp.shape[0], sp.shape[1], kSteps[s]);
      else
        adamw_ref(want[p], g, st[p], sp.kind, s + 1, kSteps[s].lrm);
    }
  }
  const auto got = params_of(toy);
  for (size_t p = 0; p < want.size(); p++) {
    // f32 against double: Polar Express's five iterations (coefficients up to 22 in magnitude) and
    // the f32 lerps carry relative errors of ~1e-5 of the update; updates are ~1e-2 of values ~0.5,
    // so 2e-6 absolute leaves a margin of about 10 while a missing stage moves elements by 1e-3.
    for (size_t j = 0; j < want[p].size(); j++) EXPECT_NEAR(got[p][j], want[p][j], 2e-6) << specs()[p].name << "[" << j << "]";
  }
}

using Params = std::vector<std::vector<float>>;

// Small buckets (about 150 and 250 floats), so the toy spans several and sharding splits them.
// replicate_below: parameters of fewer elements are replicated under sharding (the toy's are all
// under nanochat's 1024; 8 replicates the scalars and the smear gate, 0 none).
ddp::ReducerOptions reducer_options(int zero, int64_t replicate_below = 0) {
  return {.zero = zero, .whole_matrices = true, .first_bucket_mb = 0.0006, .bucket_cap_mb = 0.001,
          .replicate_below_numel = replicate_below};
}

// One rank accumulating `world` micro-batches per step, for `steps` steps.
std::vector<Params> one_rank(int world, int steps) {
  omp_set_num_threads(1);
  Toy toy;
  auto group = dist::make_single_rank_group(Device::cpu());
  ddp::Reducer reducer(toy, *group, reducer_options(0));
  ddp::Optimizer opt(toy, reducer, config_2026());
  std::vector<Params> out;
  for (int s = 0; s < steps; s++) {
    backward(toy, reducer, s, 0, world, world);
    step(opt, s);
    out.push_back(params_of(toy));
  }
  return out;
}

// `world` ranks as threads, micro-batch r on rank r. With save_dir, each rank writes its optimizer
// state there after the first step and stops.
std::vector<std::vector<Params>> ranks(int world, int zero, bool split, int steps, const std::string& save_dir = "",
                                       int64_t replicate_below = 0) {
  std::vector<std::vector<Params>> out(static_cast<size_t>(world));
  testing::run_ranks(world, [&](int r, dist::ProcessGroup& group) {
    Toy toy;
    ddp::Reducer reducer(toy, group, reducer_options(zero, replicate_below));
    ddp::OptimizerConfig oc = config_2026();
    oc.split_newton_schulz = split;
    ddp::Optimizer opt(toy, reducer, oc);
    for (int s = 0; s < steps; s++) {
      backward(toy, reducer, s, r, 1, 1);
      step(opt, s);
      out[static_cast<size_t>(r)].push_back(params_of(toy));
    }
    if (save_dir.empty()) return;
    SafetensorsWriter w;
    for (const auto& [name, t] : opt.state()) w.add(name, t);
    w.write(fmt::format("{}/optim_rank{}.safetensors", save_dir, r));
  });
  return out;
}

struct Case {
  int world, zero;
  bool split;
  int64_t replicate_below = 0;
};

class Optimizer2026Ranks : public ::testing::TestWithParam<Case> {};

// 2 ranks average g0 + g1 by one commutative addition and an exact halving, as the single rank
// does (Note [accumulation order], model/gpt.cpp), and every later operation of a parameter is the
// same arithmetic on the same bits wherever it runs: so the runs agree bit for bit.
TEST_P(Optimizer2026Ranks, EqualOneRankAccumulatingBitwise) {
  const auto [world, zero, split, replicate_below] = GetParam();
  const auto want = one_rank(world, 3);
  const auto got = ranks(world, zero, split, 3, "", replicate_below);
  for (int r = 0; r < world; r++)
    for (int s = 0; s < 3; s++)
      for (size_t p = 0; p < want[s].size(); p++)
        EXPECT_EQ(got[r][s][p], want[s][p]) << "rank " << r << " step " << s << " " << specs()[p].name;
}

INSTANTIATE_TEST_SUITE_P(Modes, Optimizer2026Ranks,
                         ::testing::Values(Case{2, 0, true}, Case{2, 0, false}, Case{2, 1, true}, Case{2, 2, true},
                                           Case{2, 1, true, 8}, Case{2, 2, true, 8}, Case{2, 2, true, 1024}),
                         [](const auto& info) {
                           return fmt::format("zero{}{}_small{}", info.param.zero, info.param.split ? "" : "_unsplit",
                                              info.param.replicate_below);
                         });

// The toy's parameters under 8 elements are the ones replicated, in buckets of their own that
// every rank updates whole: the case above exercises the rule, and the state of a replicated
// parameter is whole in every rank's file.
TEST(Optimizer2026, SmallParametersAreReplicatedAndUpdatedWholeByEveryRank) {
  testing::run_ranks(2, [&](int r, dist::ProcessGroup& group) {
    Toy toy;
    ddp::Reducer reducer(toy, group, reducer_options(2, 8));
    std::set<std::string> replicated;
    for (const ddp::Bucket& b : reducer.layout().buckets) {
      if (!b.replicated) continue;
      EXPECT_EQ(b.shard_begin(r, 2), 0);
      EXPECT_EQ(b.shard_end(r, 2), b.numel);
      for (const ddp::BucketEntry& e : b.entries) replicated.insert(specs()[size_t(e.param)].name);
    }
    EXPECT_EQ(replicated, (std::set<std::string>{"resid_lambdas", "x0_lambdas", "smear_gate.weight", "smear_lambda",
                                                 "backout_lambda"}));
    ddp::Optimizer opt(toy, reducer, config_2026());
    std::map<std::string, int64_t> state;
    for (const auto& [name, t] : opt.state()) state[name] = t.numel();
    EXPECT_EQ(state.at("adamw.m.smear_gate.weight@0"), 4) << "rank " << r;
    EXPECT_EQ(state.at("adamw.v.x0_lambdas@0"), 2) << "rank " << r;
  });
}

// --grad_clip's global norm counts a parameter every rank updates (Note [small parameters]) once,
// not once per rank: 2 ranks under --zero 2 see the norm of one rank accumulating the same two
// micro-batches. Equal to f32 rounding: the squares are summed per piece in double, in pieces that
// differ with the sharding (counted W times, the 10 replicated elements would add about 1%).
TEST(Optimizer2026, TheClipNormCountsReplicatedParametersOnce) {
  ddp::OptimizerConfig oc = config_2026();
  oc.grad_clip = 1e-3;  // below the norm: the clip runs and scales
  double want = 0;
  {
    omp_set_num_threads(1);
    Toy toy;
    auto group = dist::make_single_rank_group(Device::cpu());
    ddp::Reducer reducer(toy, *group, reducer_options(0));
    ddp::Optimizer opt(toy, reducer, oc);
    backward(toy, reducer, 0, 0, 2, 2);
    step(opt, 0);
    want = opt.last_grad_norm();
  }
  std::vector<double> got(2);
  testing::run_ranks(2, [&](int r, dist::ProcessGroup& group) {
    Toy toy;
    ddp::Reducer reducer(toy, group, reducer_options(2, 8));
    ddp::Optimizer opt(toy, reducer, oc);
    backward(toy, reducer, 0, r, 1, 1);
    step(opt, 0);
    got[size_t(r)] = opt.last_grad_norm();
  });
  ASSERT_GT(want, 0);
  for (double g : got) EXPECT_NEAR(g, want, 1e-6 * want);
}

// Restores the parameters after step 1 of a one-rank run and continues for two steps.
Params resume_one_rank(const Params& after_first, const std::function<void(ddp::Optimizer&)>& load) {
  omp_set_num_threads(1);
  Toy toy;
  auto& ps = toy.parameters();
  for (size_t p = 0; p < ps.size(); p++) std::copy(after_first[p].begin(), after_first[p].end(), ps[p].data.data<float>());
  auto group = dist::make_single_rank_group(Device::cpu());
  ddp::Reducer reducer(toy, *group, reducer_options(0));
  ddp::Optimizer opt(toy, reducer, config_2026());
  load(opt);
  for (int s = 1; s < 3; s++) {
    backward(toy, reducer, s, 0, 2, 2);
    step(opt, s);
  }
  return params_of(toy);
}

TEST(Optimizer2026, ResumeFromSavedStateIsBitwise) {
  const auto want = one_rank(2, 3);
  testing::ScratchDir scratch("optim2026");
  const std::string dir = scratch.str();
  // The same run, stopped after step 1, its state written and read back.
  {
    omp_set_num_threads(1);
    Toy toy;
    auto group = dist::make_single_rank_group(Device::cpu());
    ddp::Reducer reducer(toy, *group, reducer_options(0));
    ddp::Optimizer opt(toy, reducer, config_2026());
    backward(toy, reducer, 0, 0, 2, 2);
    step(opt, 0);
    SafetensorsWriter w;
    for (const auto& [name, t] : opt.state()) w.add(name, t);
    w.write(dir + "/one.safetensors");
  }
  SafetensorsFile one(dir + "/one.safetensors");
  EXPECT_TRUE(one.contains("muon.variance.transformer.h.0.mlp.c_proj.weight"));
  EXPECT_EQ(one.shape("muon.variance.transformer.h.0.mlp.c_proj.weight"), Shape({16}));  // wide: per column
  EXPECT_EQ(one.shape("muon.variance.transformer.h.0.mlp.c_fc.weight"), Shape({16}));    // tall: per row
  const Params plain = resume_one_rank(want[0], [&](ddp::Optimizer& o) {
    ASSERT_TRUE(o.state_matches(named(one)));
    o.load_state(named(one), "one.safetensors");
  });
  EXPECT_EQ(plain, want[2]);
  // Saved by 2 ranks under --zero 1 (each rank's file holds its shard), resharded for one rank.
  ranks(2, 1, true, 1, dir);
  SafetensorsFile r0(dir + "/optim_rank0.safetensors"), r1(dir + "/optim_rank1.safetensors");
  const Params resharded = resume_one_rank(want[0], [&](ddp::Optimizer& o) {
    EXPECT_FALSE(o.state_matches(named(r0)));
    o.load_state_resharded({&r0, &r1});
  });
  EXPECT_EQ(resharded, want[2]);
  // The same with the small parameters replicated: both files hold their whole state.
  ranks(2, 2, true, 1, dir, 8);
  SafetensorsFile s0(dir + "/optim_rank0.safetensors"), s1(dir + "/optim_rank1.safetensors");
  EXPECT_TRUE(s0.contains("adamw.m.resid_lambdas@0") && s1.contains("adamw.m.resid_lambdas@0"));
  const Params from_replicated = resume_one_rank(want[0], [&](ddp::Optimizer& o) { o.load_state_resharded({&s0, &s1}); });
  EXPECT_EQ(from_replicated, want[2]);
}

// A classic run's state has no NorMuon variance: resuming it with the 2026 optimizer must stop with
// what to do, not start the variance from zero unnoticed.
TEST(Optimizer2026, ClassicStateIsRefusedNamingTheRecipe) {
  testing::ScratchDir scratch("optim2026_classic");
  Toy toy;
  auto group = dist::make_single_rank_group(Device::cpu());
  ddp::Reducer reducer(toy, *group, reducer_options(0));
  {
    ddp::OptimizerConfig classic = config_2026();
    classic.recipe_2026 = false;
    ddp::Optimizer opt(toy, reducer, classic);
    SafetensorsWriter w;
    for (const auto& [name, t] : opt.state()) w.add(name, t);
    w.write(scratch.str("classic.safetensors"));
  }
  SafetensorsFile file(scratch.str("classic.safetensors"));
  ddp::Optimizer opt(toy, reducer, config_2026());
  EXPECT_FALSE(opt.state_matches(named(file)));
  try {
    opt.load_state_resharded({&file});
    FAIL() << "a classic state loaded into the 2026 optimizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NorMuon variance"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--recipe"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanoddp
