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

// The MFU peak table, from the facts a device reports (name, memory, multiprocessors): each
// Hopper variant gets its own data sheet's dense bf16 figure, and a GPU the facts cannot place
// gets none (flops 0) rather than the SXM figure.
TEST(PeakTable, TellsHopperVariantsApartByNameMemoryAndMultiprocessors) {
  constexpr int64_t kGiB = int64_t(1) << 30;
  struct Case {
    CudaDeviceInfo gpu;
    double tflops;
  };
  const Case cases[] = {
      {{"NVIDIA H100 80GB HBM3", 80 * kGiB, 132}, 989},  // SXM, by its name
      {{"NVIDIA H100", 80 * kGiB, 132}, 989},            // SXM, by its memory (the NVL has 94 GB)
      {{"NVIDIA H100 NVL", 94 * kGiB, 132}, 835.5},      // NVL, by its name
      {{"NVIDIA H100 PCIe", 80 * kGiB, 114}, 756},       // PCIe, by its name
      {{"NVIDIA H100", 80 * kGiB, 114}, 756},            // PCIe, by its multiprocessors
      {{"NVIDIA H100 SXM5 94GB", 94 * kGiB, 132}, 989},  // SXM at the NVL's memory, by its name
      {{"NVIDIA H100", 94 * kGiB, 132}, 0},              // SXM or NVL: not placed
      {{"NVIDIA H100", 0, 0}, 0},                        // nothing but the family: not placed
      {{"NVIDIA H200", 140 * kGiB, 132}, 989},           // the H200 SXM as it reports itself
      {{"NVIDIA H200 NVL", 140 * kGiB, 132}, 835.5},     // same memory and multiprocessors: the name
      {{"NVIDIA GH200 480GB", 95 * kGiB, 132}, 989},     // not taken for an H200 NVL or an unknown
      {{"NVIDIA H800 PCIe", 80 * kGiB, 114}, 756},
      {{"NVIDIA H800", 80 * kGiB, 132}, 989},
      {{"NVIDIA A100-SXM4-80GB", 80 * kGiB, 108}, 312},
      {{"NVIDIA GeForce RTX 3090", 24 * kGiB, 82}, 0},  // not in the table
  };
  for (const Case& c : cases) {
    const ops::PeakFlops p = ops::datasheet_peak(c.gpu);
    EXPECT_EQ(p.flops, c.tflops * 1e12) << c.gpu.name << " " << c.gpu.memory_bytes / kGiB << " GiB " << c.gpu.sm_count
                                        << " SMs: " << p.what;
    // A placed GPU names its variant; an unplaced one says what to do instead.
    if (c.tflops > 0) {
      EXPECT_EQ(p.what.find("--peak_flops"), std::string::npos) << p.what;
    } else {
      EXPECT_NE(p.what.find("--peak_flops"), std::string::npos) << p.what;
    }
  }
  EXPECT_NE(ops::datasheet_peak({"NVIDIA H200 NVL", 140 * kGiB, 132}).what.find("H200 NVL"), std::string::npos);
  EXPECT_EQ(ops::peak_flops(Device::cpu()).flops, 0);
}

}  // namespace
}  // namespace nanoddp
