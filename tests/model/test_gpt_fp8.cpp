// The GPT's FP8 training GEMMs (GPT::set_fp8, Note [fp8 layers] in model/block.cpp) on the CPU's
// emulation of ops::matmul_fp8: which layers nanochat's filter converts, a micro-step that follows
// the full-precision one within FP8's precision, evaluation left in full precision, and the
// micro-step size FP8 needs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_test_util.h"
#include "model/gpt.h"
#include "ops/ops.h"
#include "reference_gpt.h"

namespace nanoddp {
namespace {

using model::GPT;
using model::GPTConfig;

// Width 128 (one head of 128), so every block matrix and the LM head (vocab 200, padded to 256)
// pass nanochat's filter; width 64 makes none of them pass.
GPTConfig fp8_config(int64_t n_embd) {
  GPTConfig c;
  c.vocab_size = 200;
  c.n_layer = 2;
  c.n_embd = n_embd;
  c.n_head = 1;
  c.n_kv_head = 1;
  c.max_seq_len = 16;
  return c;
}

// Weights of a trained model's scale: N(0, 1 / fan_in) matrices (none zero, unlike nanochat's init,
// so that every GEMM of the backward carries a gradient), N(0, 1) embeddings.
void randomise_like_trained(GPT& gpt, uint64_t seed) {
  for (auto& p : gpt.parameters()) {
    const float std = p.kind == model::ParamKind::Embedding ? 1.f : 1.f / std::sqrt(float(p.data.dim(1)));
    copy(p.data, testing::randn(p.data.shape(), seed++, std));
  }
  gpt.refresh_compute_weights();
}

struct Step {
  double loss;
  std::vector<std::vector<double>> grads;
};

Step micro_step(GPT& gpt, const testing::Batch& b) {
  Step s{gpt.forward_backward(b.inputs, b.targets, 1.f, false), {}};
  for (auto& p : gpt.parameters()) s.grads.push_back(testing::to_double(p.grad));
  return s;
}

TEST(Fp8, NanochatsFilterConvertsWideLayersWithSizesDivisibleBy16) {
  EXPECT_TRUE(model::fp8_converts(128, 128));
  EXPECT_TRUE(model::fp8_converts(1280, 5120));   // d20's c_fc
  EXPECT_TRUE(model::fp8_converts(1280, 65536));  // d20's LM head
  EXPECT_FALSE(model::fp8_converts(64, 256));     // d1's c_fc: narrower than 128
  EXPECT_FALSE(model::fp8_converts(12, 10));      // recipe 2026's value gate
  EXPECT_FALSE(model::fp8_converts(136, 128 + 8));
  EXPECT_FALSE(model::fp8_converts(1288, 1280));
}

// FP8 moves the loss and the gradients by its precision and no more. Measured here: the loss by
// 0.4% relative; the gradients (relative L2) by 8% at the LM head, whose dW = dy^T x rounds dy to
// e5m2 (2 mantissa bits, about 5% RMS per element) and x to e4m3 (3 bits, about 2.5%), growing to
// 17% in the first block as each layer's backward adds its own rounding. The bounds (2%, 25%) leave
// room above that and stay far below what a wrong layout or a missing scale gives (order 1).
TEST(Fp8, AMicroStepFollowsFullPrecisionWithinFp8Precision) {
  GPT full(fp8_config(128), Device::cpu()), fp8(fp8_config(128), Device::cpu());
  randomise_like_trained(full, 3);
  randomise_like_trained(fp8, 3);
  fp8.set_fp8(true);
  const auto b = testing::make_batch(2, 16, 200, 9);
  const Step want = micro_step(full, b), got = micro_step(fp8, b);
  EXPECT_NE(got.loss, want.loss);  // the GEMMs did run in FP8
  EXPECT_NEAR(got.loss, want.loss, 0.02 * want.loss);
  for (size_t i = 0; i < want.grads.size(); i++) {
    const double err = testing::rel_l2(got.grads[i], want.grads[i]);
    EXPECT_LT(err, 0.25) << fp8.parameters()[i].name;
  }
}

// nanochat's disable_fp8: evaluation runs the layers in full precision, during and after training.
TEST(Fp8, EvaluationStaysInFullPrecision) {
  GPT full(fp8_config(128), Device::cpu()), fp8(fp8_config(128), Device::cpu());
  randomise_like_trained(full, 5);
  randomise_like_trained(fp8, 5);
  fp8.set_fp8(true);
  const auto b = testing::make_batch(2, 16, 200, 11);
  const std::vector<float> want = testing::to_vector(full.forward_losses(b.inputs, b.targets));
  EXPECT_EQ(testing::to_vector(fp8.forward_losses(b.inputs, b.targets)), want);
  fp8.forward_backward(b.inputs, b.targets, 1.f, false);
  EXPECT_EQ(testing::to_vector(fp8.forward_losses(b.inputs, b.targets)), want);
}

// At width 64 no layer passes the filter: --fp8 changes nothing, to the bit.
TEST(Fp8, AModelWithNoWideLayerTrainsAsWithoutFp8) {
  GPT full(fp8_config(64), Device::cpu()), fp8(fp8_config(64), Device::cpu());
  randomise_like_trained(full, 7);
  randomise_like_trained(fp8, 7);
  fp8.set_fp8(true);
  const auto b = testing::make_batch(2, 16, 200, 13);
  const Step want = micro_step(full, b), got = micro_step(fp8, b);
  EXPECT_EQ(got.loss, want.loss);
  EXPECT_EQ(got.grads, want.grads);
}

TEST(Fp8, AMicroStepOfTokensNotAMultipleOf16IsRefused) {
  GPT gpt(fp8_config(128), Device::cpu());
  randomise_like_trained(gpt, 1);
  gpt.set_fp8(true);
  const auto b = testing::make_batch(1, 15, 200, 2);
  NANODDP_EXPECT_ERROR(gpt.forward_backward(b.inputs, b.targets, 1.f, false), "multiple of 16", "--fp8");
}

}  // namespace
}  // namespace nanoddp
