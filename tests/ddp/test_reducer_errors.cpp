// A DDP engine used on a model of one's own: what PyTorch DDP refuses or handles, nanoddp must too,
// with an error naming the cause on every rank rather than an abort, a hang, or replicas that
// silently drift apart (each case below did one of those before it was checked).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/safetensors.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "ddp_test_util.h"
#include "ops/ops.h"
#include "test_util.h"

namespace nanoddp {
namespace {

// Parameters of the given shapes, all of kind Matrix unless `kinds` says otherwise; every
// gradient starts at zero.
class Params final : public model::ParameterSet {
 public:
  explicit Params(const std::vector<Shape>& shapes) {
    for (size_t i = 0; i < shapes.size(); i++) {
      model::Parameter p{"p" + std::to_string(i), model::ParamKind::Matrix, Tensor::zeros(shapes[i], DType::F32),
                         Tensor::zeros(shapes[i], DType::F32), {}};
      p.compute = p.data;
      params_.push_back(std::move(p));
    }
  }
  std::vector<model::Parameter>& parameters() override { return params_; }
  void refresh_compute_weights() override {
    for (auto& p : params_) p.compute = p.data;
  }

 private:
  std::vector<model::Parameter> params_;
};

// The message of the nanoddp::Error fn throws, "" when it throws none.
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ReducerErrors, RanksWithAnotherModelStopNamingTheDifference) {
  // Same number of elements, another shape: was trained on with rank 0's numbers read in rank 1's shape.
  std::vector<std::string> errors(2);
  testing::run_ranks(2, [&](int r, dist::ProcessGroup& group) {
    Params m({{4}, r == 0 ? Shape{3, 2} : Shape{2, 3}});
    errors[r] = error_of([&] { ddp::Reducer reducer(m, group, {}); });
  });
  EXPECT_NE(errors[1].find("parameter 1"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("[2, 3]"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("[3, 2]"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("rank 1"), std::string::npos) << "rank 0 must stop too: " << errors[0];
}

TEST(ReducerErrors, AParameterWithoutGradientIsNamedUnlessFindUnusedParameters) {
  for (bool find_unused : {false, true}) {
    std::vector<std::string> errors(2);
    std::vector<float> unused_grad(2), used_grad(2);
    testing::run_ranks(2, [&](int r, dist::ProcessGroup& group) {
      Params m({{4}, {3}});
      ddp::Reducer reducer(m, group, {.find_unused_parameters = find_unused});
      auto ready = reducer.sync_hook();
      auto& p = m.parameters();
      ops::fill(p[0].grad, 1.f + 2.f * r);  // left from an earlier step, never reported: a branch not taken
      ops::fill(p[1].grad, 2.f * r);
      ready(1);
      errors[r] = error_of([&] { reducer.finish(); });
      unused_grad[r] = p[0].grad.data<float>()[0];
      used_grad[r] = p[1].grad.data<float>()[0];
    });
    for (int r = 0; r < 2; r++) {
      if (find_unused) {
        EXPECT_EQ(errors[r], "") << "rank " << r;
        // As PyTorch DDP with zero_grad(set_to_none=True): an unused parameter contributes zero, whatever
        // its .grad held (was: the stale value, averaged again every step).
        EXPECT_EQ(unused_grad[r], 0.f) << "rank " << r;
        EXPECT_EQ(used_grad[r], 1.f) << "rank " << r;
      } else {
        EXPECT_NE(errors[r].find("p0"), std::string::npos) << "rank " << r << ": " << errors[r];
        EXPECT_NE(errors[r].find("find_unused_parameters"), std::string::npos) << errors[r];
      }
    }
  }
}

TEST(ReducerErrors, FinishWithoutTheHookAndGradientsReportedTwiceAreErrors) {
  std::vector<std::string> no_hook(2), twice(2);
  testing::run_ranks(2, [&](int r, dist::ProcessGroup& group) {
    Params m({{4}, {3}});
    ddp::Reducer reducer(m, group, {});
    // Was: finish() passed, and each rank stepped on its own gradient.
    no_hook[r] = error_of([&] { reducer.finish(); });
    auto ready = reducer.sync_hook();
    ready(0);
    twice[r] = error_of([&] { ready(0); });
    ready(1);
    reducer.finish();
  });
  for (int r = 0; r < 2; r++) {
    EXPECT_NE(no_hook[r].find("sync_hook"), std::string::npos) << "rank " << r << ": " << no_hook[r];
    EXPECT_NE(twice[r].find("reported twice"), std::string::npos) << "rank " << r << ": " << twice[r];
  }
}

TEST(ReducerErrors, ParametersWithoutGradientsOrOfAnotherTypeAreRefused) {
  auto group = dist::make_single_rank_group(Device::cpu());
  Params missing({Shape{4}});
  missing.parameters()[0].grad = Tensor();  // was: a segmentation fault
  NANODDP_EXPECT_ERROR(ddp::Reducer(missing, *group, {}), "p0", "no grad");
  Params shaped({Shape{4}});
  shaped.parameters()[0].grad = Tensor::zeros({5}, DType::F32);
  NANODDP_EXPECT_ERROR(ddp::Reducer(shaped, *group, {}), "p0", "[5]", "[4]");
  Params bf16({Shape{4}});
  bf16.parameters()[0].data = Tensor::zeros({4}, DType::BF16);
  NANODDP_EXPECT_ERROR(ddp::Reducer(bf16, *group, {}), "p0", "f32");
}

// Muon (the default optimizer) on a model of one's own under --zero 1: was an abort ("internal
// error") on the ranks whose shard split a matrix while the others went on; a bias of kind Matrix
// was an abort in Newton-Schulz.
TEST(ReducerErrors, MuonSplitAcrossShardsIsAnErrorOnEveryRankAndBiasesTakeAdamW) {
  std::vector<std::string> errors(2);
  testing::run_ranks(2, [&](int r, dist::ProcessGroup& group) {
    // 13 elements, shards of 7: the 3x3 matrix straddles them (sharded although under nanochat's
    // 1024 elements, which would replicate it whole: Note [small parameters]).
    Params m({{3, 3}, {2, 2}});
    ddp::Reducer reducer(m, group, {.zero = 1, .replicate_below_numel = 0});
    errors[r] = error_of([&] { ddp::Optimizer o(m, reducer, {}); });
  });
  for (int r = 0; r < 2; r++) EXPECT_NE(errors[r].find("whole_matrices"), std::string::npos) << errors[r];

  auto group = dist::make_single_rank_group(Device::cpu());
  Params m({{3, 2}, {3}});
  ddp::Reducer reducer(m, *group, {});
  ddp::Optimizer o(m, reducer, {});
  for (auto& p : m.parameters()) ops::fill(p.grad, 0.5f);
  reducer.finish();
  o.step(1.0, 0.9);
  std::vector<std::string> names;
  for (const auto& [name, t] : o.state()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"adamw.m.p1@0", "adamw.v.p1@0", "muon.momentum.p0", "adamw.step"}));
}

// Under --zero 0 every rank's file holds the whole state under the same names; all of them
// together must reshard as rank 0's alone does (was: "covers 6 of 3 elements").
TEST(ReducerErrors, ReplicatedStateFromEveryRankReshards) {
  testing::ScratchDir dir("reshard_zero0");
  testing::run_ranks(2, [&](int r, dist::ProcessGroup& group) {
    Params m({{3, 2}, {3}});
    ddp::Reducer reducer(m, group, {});
    ddp::Optimizer o(m, reducer, {.optimizer = ddp::OptimizerKind::AdamW});
    auto ready = reducer.sync_hook();
    for (int i = 0; i < 2; i++) {
      ops::fill(m.parameters()[i].grad, 0.25f * (i + 1) * (r + 1));
      ready(i);
    }
    reducer.finish();
    o.step(1.0, 0.9);
    SafetensorsWriter w;
    for (const auto& [name, t] : o.state()) w.add(name, t);
    w.write(dir.str("optim_rank" + std::to_string(r) + ".safetensors"));
  });
  const SafetensorsFile f0(dir.str("optim_rank0.safetensors")), f1(dir.str("optim_rank1.safetensors"));
  auto group = dist::make_single_rank_group(Device::cpu());
  Params m({{3, 2}, {3}});
  ddp::Reducer reducer(m, *group, {.zero = 1});
  ddp::Optimizer o(m, reducer, {.optimizer = ddp::OptimizerKind::AdamW});
  o.load_state_resharded({&f0, &f1});
  EXPECT_EQ(o.steps_taken(), 1);
  for (const auto& [name, t] : o.state()) {
    ASSERT_TRUE(f0.contains(name)) << name;
    if (name == "adamw.step") continue;
    EXPECT_EQ(testing::to_vector(t), testing::to_vector(f0.read(name))) << name;
  }
}

}  // namespace
}  // namespace nanoddp
