// The checks every collective passes once in ProcessGroup, before any backend runs: a recording
// backend with a chosen CollectiveSupport sees only checked calls, with Avg turned into Sum and a
// division where the backend has no average, and in-place calls recognised. Device tensors here
// are wrapped host memory that no check reads (the checks look at devices, never at the bytes).
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "comm/process_group.h"
#include "comm/work.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

struct Call {
  std::string what;
  Reduction r{};
  bool in_place = false;
};

class RecordingGroup final : public ProcessGroup {
 public:
  RecordingGroup(int rank, int size, CollectiveSupport support, Device device = Device::cpu())
      : ProcessGroup(rank, size), support_(support), device_(device) {}
  std::string backend_name() const override { return "recording"; }
  Device device() const override { return device_; }
  std::vector<Call> calls;

 protected:
  const CollectiveSupport& support() const override { return support_; }
  WorkPtr run_allreduce(const Tensor&, Reduction r) override { return record({"allreduce", r, false}); }
  WorkPtr run_reduce_scatter(const Tensor&, const Tensor&, Reduction r, bool in_place) override {
    return record({"reduce_scatter", r, in_place});
  }
  WorkPtr run_all_gather(const Tensor&, const Tensor&, bool in_place) override {
    return record({"all_gather", Reduction{}, in_place});
  }
  WorkPtr run_broadcast(const Tensor&, int) override { return record({"broadcast", Reduction{}, false}); }
  WorkPtr run_barrier() override { return record({"barrier", Reduction{}, false}); }

 private:
  WorkPtr record(Call c) {
    calls.push_back(c);
    return std::make_shared<CompletedWork>();
  }
  CollectiveSupport support_;
  Device device_;
};

std::string refuse(const char* collective, const char* backend, DType dtype) {
  return fmt::format("{} of {} refused by {}", collective, dtype_name(dtype), backend);
}

CollectiveSupport native_avg_support() {
  CollectiveSupport s;
  s.place = TensorPlace::GroupDevice;
  s.reduces = DTypeSet{DType::F32, DType::I32};
  s.averages = DTypeSet{DType::F32};
  s.refuse_dtype = refuse;
  s.refuse_avg = refuse;
  return s;
}

TEST(ProcessGroupChecks, AvgIsSumAndADivisionWhereTheBackendHasNoAverage) {
  RecordingGroup host(1, 3, host_support(TensorPlace::Host));
  Tensor t = Tensor::zeros({4}, DType::F32);
  host.allreduce(t, ReduceOp::Avg);
  host.allreduce(t, ReduceOp::Max);
  ASSERT_EQ(host.calls.size(), 2u);
  EXPECT_EQ(host.calls[0].r.op, ReduceOp::Sum);
  EXPECT_EQ(host.calls[0].r.divide_by, 3);
  EXPECT_STREQ(host.calls[0].r.name(), "avg");  // errors still name what the caller asked for
  EXPECT_EQ(host.calls[1].r.op, ReduceOp::Max);
  EXPECT_EQ(host.calls[1].r.divide_by, 1);

  RecordingGroup native(0, 3, native_avg_support());
  native.allreduce(t, ReduceOp::Avg);
  EXPECT_EQ(native.calls.at(0).r.op, ReduceOp::Avg);
  EXPECT_EQ(native.calls.at(0).r.divide_by, 1);
}

TEST(ProcessGroupChecks, FinishDividesFloatsAndTruncatesIntegers) {
  std::vector<float> f{3.f, -3.f, 1.f};
  std::vector<int64_t> i{7, -7, 2};
  Reduction r{ReduceOp::Sum, 2, ReduceOp::Avg};
  r.finish(f.data(), f.size(), DType::F32);
  r.finish(i.data(), i.size(), DType::I64);
  EXPECT_EQ(f, (std::vector<float>{1.5f, -1.5f, 0.5f}));
  EXPECT_EQ(i, (std::vector<int64_t>{3, -3, 1}));  // as C++ divides: toward zero
}

TEST(ProcessGroupChecks, RefusedDtypesNeverReachTheBackend) {
  RecordingGroup g(0, 2, native_avg_support());
  Tensor bf = Tensor::zeros({4}, DType::BF16), i32 = Tensor::zeros({4}, DType::I32);
  NANODDP_EXPECT_ERROR(g.allreduce(bf, ReduceOp::Sum), "allreduce of bf16 refused by recording");
  NANODDP_EXPECT_ERROR(g.allreduce(i32, ReduceOp::Avg), "allreduce of i32 refused by recording");
  NANODDP_EXPECT_ERROR(g.reduce_scatter(Tensor::zeros({2}, DType::BF16), Tensor::zeros({4}, DType::BF16),
                                        ReduceOp::Sum),
                       "reduce_scatter of bf16 refused by recording");
  RecordingGroup host(0, 2, host_support(TensorPlace::Host));
  NANODDP_EXPECT_ERROR(host.allreduce(bf, ReduceOp::Sum),
                       "allreduce of bf16 tensors is not supported by the recording backend (it reduces f32, f64, "
                       "i32 and i64): reduce a copy in f32 (or use the nccl backend)");
  // Data movement takes any dtype.
  host.all_gather(Tensor::zeros({8}, DType::BF16), bf);
  host.broadcast(bf, 1);
  EXPECT_TRUE(g.calls.empty());
  EXPECT_EQ(host.calls.size(), 2u);
}

// A backend that names no refusal of its own gets the plain one.
TEST(ProcessGroupChecks, ABackendWithoutItsOwnWordsGetsThePlainRefusal) {
  CollectiveSupport s;
  s.reduces = DTypeSet{DType::F32, DType::I32};
  s.averages = DTypeSet{DType::F32};
  RecordingGroup g(0, 2, s);
  NANODDP_EXPECT_ERROR(g.allreduce(Tensor::zeros({2}, DType::F64), ReduceOp::Sum),
                       "allreduce of f64 tensors is not supported by the recording backend");
  NANODDP_EXPECT_ERROR(g.allreduce(Tensor::zeros({2}, DType::I32), ReduceOp::Avg),
                       "allreduce with avg of i32 tensors is not supported by the recording backend");
  EXPECT_TRUE(g.calls.empty());
}

TEST(ProcessGroupChecks, SizesDtypesAndTheRootAreChecked) {
  RecordingGroup g(0, 2, host_support(TensorPlace::Host));
  Tensor a = Tensor::zeros({6}, DType::F32), b = Tensor::zeros({2}, DType::F32);
  NANODDP_EXPECT_ERROR(g.reduce_scatter(b, a, ReduceOp::Sum), "must have world size (2) x output (2) = 4");
  NANODDP_EXPECT_ERROR(g.all_gather(a, b), "must have world size (2) x input (2) = 4");
  NANODDP_EXPECT_ERROR(g.all_gather(Tensor::zeros({4}, DType::I32), b), "output is i32 but input is f32");
  NANODDP_EXPECT_ERROR(g.broadcast(a, 2), "root rank 2 is not in [0, 2)");
  NANODDP_EXPECT_ERROR(g.broadcast(a, -1), "root rank -1 is not in [0, 2)");
  EXPECT_TRUE(g.calls.empty());
}

TEST(ProcessGroupChecks, InPlaceIsThisRanksBlockAndOtherOverlapsAreRefused) {
  RecordingGroup g(1, 2, host_support(TensorPlace::Host));
  Tensor whole = Tensor::zeros({8}, DType::F32), other = Tensor::zeros({4}, DType::F32);
  g.reduce_scatter(whole.region(4, {4}), whole, ReduceOp::Sum);  // rank 1's block
  g.reduce_scatter(other, whole, ReduceOp::Sum);
  g.all_gather(whole, whole.region(4, {4}));
  g.all_gather(whole, other);
  ASSERT_EQ(g.calls.size(), 4u);
  EXPECT_TRUE(g.calls[0].in_place);
  EXPECT_FALSE(g.calls[1].in_place);
  EXPECT_TRUE(g.calls[2].in_place);
  EXPECT_FALSE(g.calls[3].in_place);
  // Rank 0's block on rank 1, and a block straddling two, alias the data another rank sends.
  NANODDP_EXPECT_ERROR(g.reduce_scatter(whole.region(0, {4}), whole, ReduceOp::Sum),
                       "reduce_scatter: the output overlaps the input other than at this rank's block (1)");
  NANODDP_EXPECT_ERROR(g.all_gather(whole, whole.region(2, {4})),
                       "all_gather: the input overlaps the output other than at this rank's block (1)");
  EXPECT_EQ(g.calls.size(), 4u);
}

TEST(ProcessGroupChecks, TensorsMustBeWhereTheBackendTakesThem) {
  std::vector<float> memory(4);
  auto on = [&](Device d) { return Tensor::wrap(memory.data(), {4}, DType::F32, d); };
  RecordingGroup host(0, 1, host_support(TensorPlace::Host));
  NANODDP_EXPECT_ERROR(host.allreduce(on(Device::cuda(0)), ReduceOp::Sum),
                       "the recording backend takes CPU tensors, not cuda:0");
  NANODDP_EXPECT_ERROR(host.all_gather(on(Device::cpu()), on(Device::cuda(0))), "takes CPU tensors, not cuda:0");

  RecordingGroup gpu(0, 1, native_avg_support(), Device::cuda(1));
  NANODDP_EXPECT_ERROR(gpu.broadcast(on(Device::cuda(0)), 0),
                       "the recording group on cuda:1 was given a tensor on cuda:0: move it to cuda:1");
  gpu.broadcast(on(Device::cuda(1)), 0);

  RecordingGroup staged(0, 1, host_support(TensorPlace::HostOrGroupDevice), Device::cuda(0));
  staged.allreduce(on(Device::cuda(0)), ReduceOp::Sum);
  staged.allreduce(on(Device::cpu()), ReduceOp::Sum);
  NANODDP_EXPECT_ERROR(staged.allreduce(on(Device::cuda(1)), ReduceOp::Sum),
                       "the recording group on cuda:0 was given a tensor on cuda:1: move it to cuda:0 or to the CPU");
  EXPECT_EQ(staged.calls.size(), 2u);
}

// NANODDP_DEBUG_COLLECTIVES: each issued collective is one stderr line naming the rank, its number in
// issue order, the collective, the tensor and the backend; off, nothing is written.
TEST(ProcessGroupDebug, EveryIssuedCollectiveIsOneLineWhenAskedAndNoneOtherwise) {
  RecordingGroup g(1, 3, host_support(TensorPlace::Host));
  Tensor t = Tensor::zeros({4}, DType::F32), whole = Tensor::zeros({12}, DType::F32);
  ::unsetenv("NANODDP_DEBUG_COLLECTIVES");
  ::testing::internal::CaptureStderr();
  g.allreduce(t, ReduceOp::Sum);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");

  ::setenv("NANODDP_DEBUG_COLLECTIVES", "1", 1);
  ::testing::internal::CaptureStderr();
  g.allreduce(t, ReduceOp::Avg);
  g.all_gather(whole, t);
  g.broadcast(t, 2);
  g.barrier();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("NANODDP_DEBUG_COLLECTIVES");
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << err;
  EXPECT_NE(lines[0].find("[rank 1] collective "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(": allreduce avg f32 x 4 (16 bytes) on cpu, recording"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(": all_gather f32 x 12 (48 bytes)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(": broadcast from 2 f32 x 4"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find(": barrier, recording"), std::string::npos) << lines[3];
  // Numbered in issue order: each line's number is one more than the line before.
  auto number = [](const std::string& l) {
    const size_t at = l.find("collective ") + 11;
    return std::stoull(l.substr(at, l.find(':', at) - at));
  };
  for (size_t i = 1; i < lines.size(); i++) EXPECT_EQ(number(lines[i]), number(lines[i - 1]) + 1) << err;
  ::setenv("NANODDP_DEBUG_COLLECTIVES", "0", 1);  // "0" is off, as unset
  ::testing::internal::CaptureStderr();
  g.barrier();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ::unsetenv("NANODDP_DEBUG_COLLECTIVES");
}

}  // namespace
}  // namespace nanoddp::dist
