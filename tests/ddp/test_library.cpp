// docs/library.md's mixed-precision recipe for a model of one's own, written with the public
// headers only: f32 master weights and gradients, a bf16 compute copy the forward reads, a weight
// gradient from bf16 activations written straight into the f32 grad, and the optimizer keeping
// the bf16 copy equal to the new weights after every step.
#include <gtest/gtest.h>
#include <nanoddp/ddp.h>
#include <nanoddp/distributed.h>
#include <nanoddp/ops.h>
#include <nanoddp/optimizer.h>
#include <nanoddp/tensor.h>

#include <cmath>
#include <optional>
#include <string>

namespace nanoddp {
namespace {

// One bias-free Linear layer, weight [out 4, in 3], with a bf16 compute copy.
class Bf16Linear final : public model::ParameterSet {
 public:
  Bf16Linear() {
    Tensor w = Tensor::empty({4, 3}, DType::F32);
    for (int64_t i = 0; i < w.numel(); i++) w.data<float>()[i] = 0.1f * static_cast<float>(i) - 0.37f;
    params_.push_back({"w", model::ParamKind::Matrix, w, Tensor::zeros({4, 3}, DType::F32),
                       Tensor::empty({4, 3}, DType::BF16)});
    refresh_compute_weights();
  }
  std::vector<model::Parameter>& parameters() override { return params_; }
  void refresh_compute_weights() override {
    for (auto& p : params_) ops::cast(p.compute, p.data);
  }

 private:
  std::vector<model::Parameter> params_;
};

Tensor bf16_of(const std::vector<float>& values, Shape shape) {
  Tensor f = Tensor::empty(shape, DType::F32), b = Tensor::empty(shape, DType::BF16);
  std::copy(values.begin(), values.end(), f.data<float>());
  ops::cast(b, f);
  return b;
}

// Whether every element of the bf16 copy is its f32 weight rounded to nearest even.
bool compute_is_rounded_data(const model::Parameter& p) {
  for (int64_t i = 0; i < p.data.numel(); i++)
    if (p.compute.data<bf16>()[i].bits != f32_to_bf16(p.data.data<float>()[i]).bits) return false;
  return true;
}

// A single rank whatever launched the test binary.
std::optional<std::string> no_launcher(const std::string&) { return std::nullopt; }

TEST(LibraryMixedPrecision, Bf16ComputeCopiesFollowTheF32WeightsThroughEveryStep) {
  Bf16Linear model;
  auto ctx = dist::init_distributed(dist::DistOptions{}, Device::cpu(), dist::discover_environment(no_launcher));
  ddp::Reducer reducer(model, *ctx->group, ddp::ReducerOptions{});
  ddp::OptimizerConfig oc;
  oc.optimizer = ddp::OptimizerKind::AdamW;
  oc.adamw_matrix_lr = 0.05;
  ddp::Optimizer optimizer(model, reducer, oc);
  model::Parameter& w = model.parameters()[0];
  ASSERT_TRUE(compute_is_rounded_data(w));

  // x [2 batch, 3 in] and dy [2, 4 out] in bf16; dW [4, 3] = dy^T x lands in the f32 grad.
  const std::vector<float> xs{0.5f, -1.25f, 2.f, 0.3f, 0.7f, -0.1f}, dys{1.f, -0.5f, 0.25f, 2.f, -1.f, 0.1f, 0.6f, -0.3f};
  const Tensor x = bf16_of(xs, {2, 3}), dy = bf16_of(dys, {2, 4});
  for (int step = 0; step < 3; step++) {
    const float first_weight = w.data.data<float>()[0];
    ops::matmul(w.grad, dy, true, x, false, 1.f, 0.f);
    // Each product of two bf16 values is exact in f32 and the sum of two adds one f32 rounding:
    // a relative 1e-6 covers it.
    for (int o = 0; o < 4; o++)
      for (int i = 0; i < 3; i++) {
        double want = 0;
        for (int b = 0; b < 2; b++)
          want += double(round_to_bf16(dys[b * 4 + o])) * double(round_to_bf16(xs[b * 3 + i]));
        EXPECT_NEAR(w.grad.data<float>()[o * 3 + i], want, 1e-6 * std::abs(want) + 1e-12) << o << "," << i;
      }
    reducer.sync_hook()(0);
    reducer.finish();
    optimizer.step(1.0, 0.0);
    EXPECT_NE(w.data.data<float>()[0], first_weight) << "the step changed nothing, so the check below means nothing";
    EXPECT_TRUE(compute_is_rounded_data(w)) << "after step " << step;
  }
}

}  // namespace
}  // namespace nanoddp
