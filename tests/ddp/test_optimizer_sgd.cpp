// ddp::Optimizer on a model of one's own (model::ParameterSet): SGD with momentum against
// torch.optim.SGD's rule, computed here in double for three steps.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/process_group.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"

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
  oc.optimizer = "sgd";
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

}  // namespace
}  // namespace nanoddp
