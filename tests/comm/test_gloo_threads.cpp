// The Gloo process group with ranks as threads of this process, sharing one in-memory store:
// every collective against exact expected values for world sizes 1-8, directly and through the
// host staging that CUDA tensors take, argument errors, and a stalled rank making the others fail
// with a diagnosis.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <thread>

#include "collective_checks.h"
#include "core/error.h"
#include "comm/gloo_group.h"
#include "comm/host_staging.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/prefix_store.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

using namespace std::chrono_literals;
using RankFn = std::function<std::vector<std::string>(GlooGroup&)>;

GlooGroupOptions local_options(std::chrono::milliseconds timeout = 60s) {
  GlooGroupOptions o;
  o.timeout = timeout;
  o.bind_address = "127.0.0.1";
  return o;
}

// Runs `fn` on `world` ranks, one thread and one GlooGroup each; returns every rank's failures
// (including errors thrown), prefixed with the rank.
std::vector<std::string> run_ranks(int world, const GlooGroupOptions& options, const RankFn& fn) {
  return testing::run_thread_ranks(world, [&](const std::shared_ptr<Store>& store, int r) {
    GlooGroup group(std::make_shared<PrefixStore>("pg", store), r, world, options);
    return fn(group);
  });
}

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, EveryCollectiveIsExact) {
  testing::CheckOptions checks;
  checks.salt = uint64_t(GetParam());
  auto failures = run_ranks(GetParam(), local_options(),
                            [&](GlooGroup& g) { return testing::check_all_collectives(g, checks); });
  EXPECT_TRUE(failures.empty()) << testing::join_lines(failures);
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooWorld, ::testing::Range(1, 9));

// The path CUDA tensors take (Note [staging] in comm/host_staging.h), with host tensors: every
// collective through the staging buffer, in-place ones included, exact.
class GlooStagedWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooStagedWorld, EveryCollectiveThroughTheStagingBufferIsExact) {
  testing::CheckOptions checks;
  checks.salt = uint64_t(GetParam()) + 100;
  GlooGroupOptions o = local_options();
  o.stage_host_tensors = true;
  auto failures = run_ranks(GetParam(), o, [&](GlooGroup& g) { return testing::check_all_collectives(g, checks); });
  EXPECT_TRUE(failures.empty()) << testing::join_lines(failures);
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooStagedWorld, ::testing::Values(1, 2, 3, 5));

// One buffer holds a collective's host copies; it grows to the largest collective and is reused,
// never reallocated for a smaller or equal one.
TEST(HostStaging, OneBufferGrowsToTheLargestCollectiveAndIsReused) {
  HostStaging staging;
  ReadyMark host_ready;
  Tensor big = Tensor::empty({1000}, DType::F32), out = Tensor::empty({250}, DType::F32);
  for (int64_t i = 0; i < 1000; i++) big.data<float>()[i] = float(i);
  // reduce_scatter-like: `out` is only written, `big` only read, both in the one buffer.
  HostStaging::Views v = staging.stage_in(out, big, host_ready);
  EXPECT_EQ(v.input.numel(), 1000);
  EXPECT_EQ(v.input.data<float>()[999], 999.f);
  EXPECT_NE(v.input.raw(), big.raw());
  EXPECT_GE(static_cast<char*>(v.input.raw()), static_cast<char*>(v.data.raw()) + out.nbytes());  // apart
  for (int64_t i = 0; i < 250; i++) v.data.data<float>()[i] = -float(i);
  staging.stage_out(out, v);
  EXPECT_EQ(out.data<float>()[249], -249.f);
  const size_t capacity = staging.capacity();
  EXPECT_GE(capacity, big.nbytes() + out.nbytes());
  // allreduce-like, smaller and equal: the same buffer; the data itself is copied in.
  for (int k = 0; k < 5; k++) {
    HostStaging::Views w = staging.stage_in(big, Tensor(), host_ready);
    EXPECT_EQ(w.data.data<float>()[7], 7.f);
    staging.stage_out(big, w);
  }
  EXPECT_EQ(staging.allocations(), 1);
  EXPECT_EQ(staging.capacity(), capacity);
  Tensor bigger = Tensor::zeros({int64_t(capacity)}, DType::F32);
  staging.stage_in(bigger, Tensor(), host_ready);
  EXPECT_EQ(staging.allocations(), 2);
  EXPECT_GE(staging.capacity(), bigger.nbytes());
}

TEST(GlooGroup, RefusesWhatItCannotReduce) {
  auto failures = run_ranks(2, local_options(), [](GlooGroup& g) {
    Tensor bf = Tensor::zeros({4}, DType::BF16);
    NANODDP_EXPECT_ERROR(g.allreduce(bf, ReduceOp::Sum),
                         "allreduce of bf16 tensors is not supported by the gloo backend");
    Tensor a = Tensor::zeros({6}, DType::F32), b = Tensor::zeros({2}, DType::F32);
    NANODDP_EXPECT_ERROR(g.reduce_scatter(b, a, ReduceOp::Sum), "must have world size (2) x output (2) = 4");
    NANODDP_EXPECT_ERROR(g.all_gather(a, b), "must have world size (2) x input (2) = 4");
    NANODDP_EXPECT_ERROR(g.broadcast(a, 2), "root rank 2 is not in [0, 2)");
    // bf16 still moves as data.
    Tensor gathered = Tensor::zeros({8}, DType::BF16);
    g.all_gather(gathered, bf)->wait();
    g.broadcast(bf, 0)->wait();
    return std::vector<std::string>{};  // the checks above report for themselves
  });
  EXPECT_TRUE(failures.empty()) << testing::join_lines(failures);
}

// One rank stalls before its second collective; the others must fail within the timeout (plus
// the diagnosis) with an error naming the collective and the stalled rank.
TEST(GlooGroup, StalledRankMakesTheOthersFailWithADiagnosis) {
  constexpr int kWorld = 3, kStalled = 2;
  const auto timeout = 1500ms;
  std::vector<std::string> errors(kWorld);
  std::vector<double> seconds(kWorld);
  std::atomic<int> finished{0};  // ranks done with collective #2
  auto store = std::make_shared<HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; r++) {
    threads.emplace_back([&, r] {
      GlooGroup g(std::make_shared<PrefixStore>("pg", store), r, kWorld, local_options(timeout));
      Tensor t = Tensor::zeros({1 << 20}, DType::F32);
      g.allreduce(t, ReduceOp::Sum)->wait();  // #1: everyone
      if (r == kStalled) {  // stays away until the others have given up (heartbeat still running)
        while (finished < kWorld - 1) std::this_thread::sleep_for(10ms);
        return;
      }
      auto start = std::chrono::steady_clock::now();
      try {
        g.allreduce(t, ReduceOp::Sum)->wait();  // #2: rank 2 never comes
      } catch (const Error& e) {
        errors[r] = e.what();
      }
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      finished++;
    });
  }
  for (auto& t : threads) t.join();
  std::printf("rank 0's error: %s\n", errors[0].c_str());
  for (int r = 0; r < kWorld; r++) {
    if (r == kStalled) continue;
    const std::string& e = errors[r];
    EXPECT_NE(e.find("allreduce #2 of 4.0 MiB (f32, sum) timed out after 1.5 s on rank"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 2 had not reached it (rank 2: its last collective was #1"), std::string::npos) << e;
    EXPECT_NE(e.find("it is still running"), std::string::npos) << e;  // its heartbeat kept going
    EXPECT_NE(e.find("rank 2 may have crashed or stalled; see its output"), std::string::npos) << e;
    EXPECT_LT(seconds[r], 10.0) << "the failure was not detected in bounded time";
  }
}

TEST(GlooGroup, AfterAFailureLaterCollectivesRefuseToRun) {
  auto store = std::make_shared<HashStore>();
  std::atomic<bool> done{false};
  std::thread r1([&] {
    GlooGroup g(std::make_shared<PrefixStore>("pg", store), 1, 2, local_options(800ms));
    while (!done) std::this_thread::sleep_for(10ms);  // never joins collective #1
  });
  {
    GlooGroup g(std::make_shared<PrefixStore>("pg", store), 0, 2, local_options(800ms));
    Tensor t = Tensor::zeros({16}, DType::F32);
    EXPECT_THROW(g.allreduce(t, ReduceOp::Sum)->wait(), Error);
    NANODDP_EXPECT_ERROR(g.barrier()->wait(),
                         "barrier #2 was not run because this process group failed earlier (allreduce #1");
    done = true;
  }
  r1.join();
}

}  // namespace
}  // namespace nanoddp::dist
