// ddp::Optimizer on a model of one's own (model::ParameterSet): SGD with momentum against
// torch.optim.SGD's rule, computed here in double for three steps; its state (the momentum buffer
// and the step count) saved and loaded as named tensors.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/process_group.h"
#include "core/error.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "test_util.h"

namespace nanoddp {
namespace {

class Two final : public model::ParameterSet {
 public:
  Two() {
    params_.push_back({"w", model::ParamKind::Matrix, Tensor::zeros({3, 2}, DType::F32),
                       Tensor::zeros({3, 2}, DType::F32), Tensor()});
    params_.push_back({"b", model::ParamKind::Matrix, Tensor::zeros({3}, DType::F32), Tensor::zeros({3}, DType::F32),
                       Tensor()});
  }
  std::vector<model::Parameter>& parameters() override { return params_; }

 private:
  std::vector<model::Parameter> params_;
};

TEST(Sgd, MomentumAndWeightDecayFollowTorchOptimSgd) {
  Two model;
  auto group = dist::make_single_rank_group(Device::cpu());
  ddp::Reducer reducer(model, *group, ddp::ReducerOptions{});
  ddp::OptimizerConfig oc;
  oc.optimizer = ddp::OptimizerKind::Sgd;
  oc.sgd_lr = 0.1;
  oc.sgd_momentum = 0.9;
  oc.weight_decay = 0.01;
  ddp::Optimizer opt(model, reducer, oc);
  auto& ps = model.parameters();
  std::vector<double> p(9), buf(9, 0);
  for (int i = 0; i < 9; i++) {
    p[i] = 0.1 * i - 0.3;
    (i < 6 ? ps[0].data.data<float>()[i] : ps[1].data.data<float>()[i - 6]) = static_cast<float>(p[i]);
  }
  for (int step = 1; step <= 3; step++) {
    for (int i = 0; i < 9; i++) {
      const float g = static_cast<float>(std::sin(step * 3.0 + i));
      (i < 6 ? ps[0].grad.data<float>()[i] : ps[1].grad.data<float>()[i - 6]) = g;
      const double gd = g + 0.01 * p[i];
      buf[i] = 0.9 * buf[i] + gd;
      p[i] -= 0.1 * buf[i];
    }
    reducer.finish();
    opt.step(1.0, 0.0);
  }
  for (int i = 0; i < 9; i++) {
    const float got = i < 6 ? ps[0].data.data<float>()[i] : ps[1].data.data<float>()[i - 6];
    // f32 arithmetic of a few operations per step: a few ulps of values ~1.
    EXPECT_NEAR(got, p[i], 1e-6) << i;
  }
}

// state() as a map of named tensors loads into a fresh optimizer (the caller reads them from
// wherever it keeps them); a map that is not this optimizer's state is refused naming its source.
TEST(Sgd, StateLoadsFromNamedTensorsAndEveryStepIsCounted) {
  auto group = dist::make_single_rank_group(Device::cpu());
  ddp::OptimizerConfig oc;
  oc.optimizer = ddp::OptimizerKind::Sgd;
  Two a_model, b_model;
  ddp::Reducer a_reducer(a_model, *group, ddp::ReducerOptions{}), b_reducer(b_model, *group, ddp::ReducerOptions{});
  ddp::Optimizer a(a_model, a_reducer, oc), b(b_model, b_reducer, oc);
  for (int step = 0; step < 2; step++) {
    for (auto& p : a_model.parameters())
      for (int64_t i = 0; i < p.grad.numel(); i++) p.grad.data<float>()[i] = 0.5f * static_cast<float>(i - step);
    a_reducer.finish();
    a.step(1.0, 0.0);
  }
  EXPECT_EQ(a.steps_taken(), 2);  // SGD's steps too, not only AdamW's
  ddp::NamedTensors saved;
  for (const auto& [name, t] : a.state()) saved.emplace(name, t.copy_to(Device::cpu()));
  ASSERT_TRUE(b.state_matches(saved));
  b.load_state(saved, "saved.safetensors");
  EXPECT_EQ(b.steps_taken(), 2);
  for (const auto& [name, t] : b.state()) {
    if (name != "adamw.step") {
      EXPECT_EQ(testing::to_vector(t), testing::to_vector(saved.at(name))) << name;
    }
  }

  auto missing = saved;
  missing.erase("adamw.m.w@0");
  EXPECT_FALSE(b.state_matches(missing));
  NANODDP_EXPECT_ERROR(b.load_state(missing, "saved.safetensors"), "saved.safetensors", "tensors where this run");
  auto reshaped = saved;
  reshaped["adamw.m.w@0"] = Tensor::zeros({5}, DType::F32);
  EXPECT_FALSE(b.state_matches(reshaped));
  NANODDP_EXPECT_ERROR(b.load_state(reshaped, "saved.safetensors"), "'adamw.m.w@0' is f32 [5]");
  // A step count of another type (a damaged or foreign file) is named, not read as an int64.
  auto bad_step = saved;
  bad_step["adamw.step"] = Tensor::zeros({1}, DType::F32);
  NANODDP_EXPECT_ERROR(b.load_state(bad_step, "saved.safetensors"), "saved.safetensors", "'adamw.step' is f32");
}

}  // namespace
}  // namespace nanoddp
