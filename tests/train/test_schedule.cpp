// nanochat's LR multiplier and Muon momentum schedules.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/schedule.h"

namespace nanoddp::train {
namespace {

TEST(Schedule, WarmupConstantWarmdown) {
  // N = 100, warmup 10, warmdown 20 ending at 0.1.
  EXPECT_DOUBLE_EQ(lr_multiplier(0, 100, 0.1, 0.2, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(lr_multiplier(9, 100, 0.1, 0.2, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(50, 100, 0.1, 0.2, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(80, 100, 0.1, 0.2, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(90, 100, 0.1, 0.2, 0.1), 0.5 + 0.5 * 0.1);
  EXPECT_DOUBLE_EQ(lr_multiplier(100, 100, 0.1, 0.2, 0.1), 0.1);
  // nanochat's defaults: no warmup, last 20% to zero.
  EXPECT_DOUBLE_EQ(lr_multiplier(0, 10, 0.0, 0.2, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(9, 10, 0.0, 0.2, 0.0), 0.5);
}

TEST(Schedule, MuonMomentumRamps) {
  EXPECT_DOUBLE_EQ(muon_momentum(0), 0.85);
  EXPECT_DOUBLE_EQ(muon_momentum(150), 0.90);
  EXPECT_DOUBLE_EQ(muon_momentum(300), 0.95);
  EXPECT_DOUBLE_EQ(muon_momentum(1000), 0.95);
}

// nanochat's base_train at N = 10, warmdown_ratio 0.65: round(6.5) is 6 in Python (halves to even),
// so the warmdown starts at step 4.
TEST(Schedule2026, LrWarmupInStepsAndWarmdownRoundedHalfToEven) {
  EXPECT_DOUBLE_EQ(lr_multiplier_2026(0, 10, 2, 0.65, 0.05), 0.5);
  EXPECT_DOUBLE_EQ(lr_multiplier_2026(1, 10, 2, 0.65, 0.05), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier_2026(4, 10, 2, 0.65, 0.05), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier_2026(5, 10, 2, 0.65, 0.05), 5.0 / 6 + (1.0 / 6) * 0.05);
  EXPECT_DOUBLE_EQ(lr_multiplier_2026(7, 10, 2, 0.65, 0.05), 0.5 + 0.5 * 0.05);
  // Warmup in steps whatever N: 40 steps of a 1000-step run.
  EXPECT_DOUBLE_EQ(lr_multiplier_2026(19, 1000, 40, 0.65, 0.05), 0.5);
  EXPECT_DOUBLE_EQ(lr_multiplier_2026(40, 1000, 40, 0.65, 0.05), 1.0);
}

TEST(Schedule2026, MuonMomentumWarmsUpTo097AndDownTo090) {
  // N = 2000, warmdown 0.5: the warmdown starts at 1000.
  EXPECT_DOUBLE_EQ(muon_momentum_2026(0, 2000, 0.5), 0.85);
  EXPECT_DOUBLE_EQ(muon_momentum_2026(200, 2000, 0.5), 0.5 * 0.85 + 0.5 * 0.97);
  EXPECT_DOUBLE_EQ(muon_momentum_2026(400, 2000, 0.5), 0.97);
  EXPECT_DOUBLE_EQ(muon_momentum_2026(999, 2000, 0.5), 0.97);
  EXPECT_DOUBLE_EQ(muon_momentum_2026(1000, 2000, 0.5), 0.97);
  EXPECT_DOUBLE_EQ(muon_momentum_2026(1500, 2000, 0.5), 0.97 * 0.5 + 0.90 * 0.5);
  EXPECT_DOUBLE_EQ(muon_momentum_2026(2000, 2000, 0.5), 0.90);
  // The warmup wins while both apply (N = 100: the warmdown starts at 50).
  EXPECT_DOUBLE_EQ(muon_momentum_2026(60, 100, 0.5), 0.85 * (1 - 60.0 / 400) + 0.97 * 60.0 / 400);
}

TEST(Schedule2026, MuonWeightDecayIsACosineToZero) {
  EXPECT_DOUBLE_EQ(muon_weight_decay_2026(0, 100, 0.2), 0.2);
  EXPECT_NEAR(muon_weight_decay_2026(50, 100, 0.2), 0.1, 1e-15);  // cos(pi / 2) is 6e-17, not 0
  EXPECT_NEAR(muon_weight_decay_2026(25, 100, 0.2), 0.1 * (1 + std::sqrt(0.5)), 1e-15);
  EXPECT_NEAR(muon_weight_decay_2026(100, 100, 0.2), 0.0, 1e-15);
}

// R = 10, P = 8e6, P12 = 1e6: D = 8e7, D_ref = 1e7, predicted batch
// 2^19 8^0.383 = 2^(19 + 1.149), rounded to 2^20; lrs x sqrt(2); weight decay x sqrt(2) / 8.
TEST(Schedule2026, ScalingWithTheTokensParamsRatio) {
  const RecipeScaling s = recipe_scaling_2026(8'000'000, 1'000'000, 10.0, -1, 0.28);
  EXPECT_EQ(s.target_tokens, 80'000'000);
  EXPECT_EQ(s.total_batch_size, 1 << 20);
  EXPECT_DOUBLE_EQ(s.lr_scale, std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(s.weight_decay, 0.28 * std::sqrt(2.0) / 8);
  // At the reference size everything stays as given.
  const RecipeScaling ref = recipe_scaling_2026(1'000'000, 1'000'000, 12.0, -1, 0.28);
  EXPECT_EQ(ref.total_batch_size, kReferenceBatchTokens);
  EXPECT_DOUBLE_EQ(ref.lr_scale, 1.0);
  EXPECT_DOUBLE_EQ(ref.weight_decay, 0.28);
  // A given batch is kept, and still scales the lrs: 2^17 = B_ref / 4 halves them.
  const RecipeScaling given = recipe_scaling_2026(1'000'000, 1'000'000, 12.0, 1 << 17, 0.28);
  EXPECT_EQ(given.total_batch_size, 1 << 17);
  EXPECT_DOUBLE_EQ(given.lr_scale, 0.5);
  EXPECT_DOUBLE_EQ(given.weight_decay, 0.14);
  // A model 1/64 of the reference: 2^19 64^-0.383 = 2^(19 - 2.298), rounded to 2^17.
  EXPECT_EQ(recipe_scaling_2026(1'000'000 / 64, 1'000'000, 12.0, -1, 0.28).total_batch_size, 1 << 17);
}

TEST(Schedule2026, ARatioGivingNoTokensIsAnError) {
  // 0.1 x 5 parameters is 0 tokens after the floor: the weight decay's D_ref / D would divide by 0.
  EXPECT_THROW(recipe_scaling_2026(5, 1'000'000, 0.1, -1, 0.28), Error);
}

}  // namespace
}  // namespace nanoddp::train
