// The op profiler (ops/profile.h) on the CPU: what it counts, and that it counts nothing when off.
// Its device-timed path (CUDA events) is tested in tests/ops/cuda/test_cuda_ops.cpp.
#include <gtest/gtest.h>

#include "core/timer.h"
#include "ops/ops.h"
#include "ops/profile.h"

namespace nanoddp {
namespace {

struct ProfilingOn {
  ProfilingOn() {
    ops::reset_profile();
    ops::set_profiling(true);
  }
  ~ProfilingOn() { ops::set_profiling(false); }
};

TEST(OpProfile, CountsCallsFlopsAndHostTimePerOpName) {
  Tensor a = Tensor::zeros({64, 32}, DType::F32), b = Tensor::zeros({16, 32}, DType::F32),
         c = Tensor::zeros({64, 16}, DType::F32);
  double wall = 0;
  {
    ProfilingOn on;
    Stopwatch sw;
    for (int i = 0; i < 3; i++) ops::matmul(c, a, false, b, true);
    ops::fill(c, 1.f);
    wall = sw.seconds();
  }
  ops::matmul(c, a, false, b, true);  // after set_profiling(false): not counted
  auto stats = ops::profile_snapshot();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats["matmul"].calls, 3);
  EXPECT_DOUBLE_EQ(stats["matmul"].flops, 3 * 2.0 * 64 * 16 * 32);
  EXPECT_EQ(stats["fill"].calls, 1);
  EXPECT_EQ(stats["fill"].flops, 0);
  // Each op's time lies inside the wall time around all of them.
  EXPECT_GT(stats["matmul"].seconds, 0);
  EXPECT_LE(stats["matmul"].seconds + stats["fill"].seconds, wall);
  // By shape: the matmuls under their shape, transposes and dtypes; fill gives no detail.
  auto detail = ops::profile_detail_snapshot();
  ASSERT_EQ(detail.size(), 1u);
  EXPECT_EQ(detail.begin()->first, "matmul 64x16x32 NT f32->f32");
  EXPECT_EQ(detail.begin()->second.calls, 3);
  EXPECT_DOUBLE_EQ(detail.begin()->second.seconds, stats["matmul"].seconds);
  ops::reset_profile();
  EXPECT_TRUE(ops::profile_snapshot().empty());
  EXPECT_TRUE(ops::profile_detail_snapshot().empty());
}

}  // namespace
}  // namespace nanoddp
