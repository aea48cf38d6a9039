// nanochat's LR multiplier and Muon momentum schedules.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace nanoddp::train
