// core: caching allocator, tensor views, bf16 rounding, RNG, typed options, device parsing, files.
// The safetensors format, the trace recorder, console output and the machine report have files of
// their own beside this one.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "core/allocator.h"
#include "core/files.h"
#include "core/options.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "test_util.h"

namespace nanoddp {
namespace {

TEST(CachingAllocator, ClassSizesBoundTheSlack) {
  for (size_t n : {1ul, 63ul, 64ul, 65ul, 1000ul, 4097ul, 1ul << 20, (1ul << 20) + 1, 33554433ul}) {
    size_t c = CachingAllocator::class_size(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, std::max<size_t>(64, n + n / 4 + 64)) << n;
    EXPECT_EQ(c % 64, 0u);
  }
}

TEST(CachingAllocator, FreedBlocksAreReusedNotReturned) {
  size_t system_allocs = 0, system_frees = 0;
  CachingAllocator alloc(
      "test", [&](size_t n) { system_allocs++; return std::aligned_alloc(64, n); },
      [&](void* p) { system_frees++; std::free(p); });
  void* a = alloc.allocate(100 << 20);
  alloc.deallocate(a, 100 << 20);
  void* b = alloc.allocate((100 << 20) - 5);  // same class
  EXPECT_EQ(a, b);
  EXPECT_EQ(system_allocs, 1u);
  EXPECT_EQ(alloc.stats().cache_hits, 1u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  alloc.deallocate(b, (100 << 20) - 5);
  EXPECT_EQ(alloc.stats().live_bytes, 0u);
  EXPECT_GT(alloc.stats().cached_bytes, 0u);
  alloc.release_cached();
  EXPECT_EQ(system_frees, 1u);
  EXPECT_EQ(alloc.stats().system_bytes, 0u);
}

TEST(CachingAllocator, OutOfMemoryIsAnError) {
  CachingAllocator alloc("test", [](size_t) -> void* { return nullptr; }, [](void*) {});
  EXPECT_THROW(alloc.allocate(1024), Error);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::zeros({4, 3}, DType::F32);
  Tensor r = t.rows(1, 3);
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  r.data<float>()[0] = 7.f;
  EXPECT_EQ(t.data<float>()[3], 7.f);
  Tensor g = t.region(5, {2, 2});
  g.data<float>()[3] = 9.f;
  EXPECT_EQ(t.data<float>()[8], 9.f);
  EXPECT_TRUE(g.shares_storage(t));
  Tensor v = t.view({12});
  EXPECT_EQ(v.data<float>()[8], 9.f);
  Tensor c = t.copy_to(Device::cpu());
  EXPECT_FALSE(c.shares_storage(t));
  EXPECT_EQ(c.data<float>()[8], 9.f);
}

TEST(Tensor, UndefinedHoldsNoBytes) {
  // A default Tensor has no storage: counting its bytes (as optimizer state sizes do) must give 0,
  // while a defined scalar of the same empty shape holds one element.
  EXPECT_EQ(Tensor().nbytes(), 0u);
  EXPECT_EQ(Tensor::zeros(Shape{}, DType::F32).nbytes(), 4u);
}

TEST(Tensor, BadViewIsABug) {
  Tensor t = Tensor::zeros({4, 3}, DType::F32);
  EXPECT_DEATH(t.view({5}), "internal error");
  EXPECT_DEATH(t.data<int32_t>(), "accessed as i32");
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: goes to 1 + 2^-6.
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(round_to_bf16(-INFINITY), -INFINITY);
}

TEST(Rng, DeterministicStreamsWithNormalMoments) {
  Rng a(42, stream_id("wte")), b(42, stream_id("wte")), c(42, stream_id("lm_head"));
  EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_NE(a.next_u64(), c.next_u64());
  Rng r(7);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; i++) {
    double x = r.normal();
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  auto st = r.state();
  float x1 = r.uniform();
  r.set_state(st);
  EXPECT_EQ(r.uniform(), x1);
}

// stream_seed: every stream of a seed gets its own seed, never the seed itself, and the streams
// of two seeds do not meet (checked over the small seeds and places runs use).
TEST(Rng, StreamSeedsDifferPerStreamAndSeed) {
  std::set<uint64_t> seen;
  for (uint64_t seed = 0; seed < 16; seed++) {
    for (uint64_t stream = 0; stream < 256; stream++) {
      const uint64_t s = stream_seed(seed, stream);
      EXPECT_EQ(s, stream_seed(seed, stream));
      EXPECT_NE(s, seed);
      EXPECT_TRUE(seen.insert(s).second) << "seed " << seed << " stream " << stream;
    }
  }
}

struct DemoOptions {
  int depth = 4;
  double lr = 0.02;
  std::string name = "x";
  bool flag = false;
  template <typename V>
  void visit(V&& v) {
    v(depth, "depth", "layers");
    v(lr, "lr", "learning rate");
    v(name, "name", "a name");
    v(flag, "flag", "a switch");
  }
};

TEST(Options, JsonRoundTripAndDiff) {
  DemoOptions a;
  a.depth = 6;
  a.name = "y";
  auto j = options_to_json(a);
  DemoOptions b;
  options_from_json(b, j, "test");
  EXPECT_EQ(b.depth, 6);
  EXPECT_EQ(b.name, "y");
  b.lr = 0.5;
  auto d = options_diff(a, b);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].name, "lr");
  EXPECT_THROW(options_from_json(b, nlohmann::json{{"depht", 3}}, "test"), Error);
  EXPECT_THROW(options_from_json(b, nlohmann::json{{"depth", "three"}}, "test"), Error);
}

TEST(Device, Parse) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_THROW(parse_device("tpu"), Error);
  EXPECT_THROW(parse_device("cuda:x"), Error);
}

// read_whole_file returns every byte (binary, larger than its first buffer, and empty files) and
// names the file and the reason when it cannot: a directory would otherwise read as empty.
TEST(Files, ReadWholeFileReadsEveryByteOrSaysWhy) {
  testing::ScratchDir dir("core_files");
  std::string big(300 * 1024 + 7, '\0');
  for (size_t i = 0; i < big.size(); i++) big[i] = char((i * 131 + i / 977) & 0xff);
  std::ofstream(dir.str("big.bin"), std::ios::binary) << big;
  EXPECT_EQ(read_whole_file(dir.str("big.bin")), big);
  std::ofstream(dir.str("empty.txt")).flush();
  EXPECT_EQ(read_whole_file(dir.str("empty.txt")), "");
  write_file_atomically(dir.str("small.txt"), "a\nb\r\n");
  EXPECT_EQ(read_whole_file(dir.str("small.txt"), "notes"), "a\nb\r\n");
  // Not a regular file: stat says size 0, the content is not empty.
  EXPECT_NE(read_whole_file("/proc/self/status").find("Name:"), std::string::npos);
  NANODDP_EXPECT_ERROR(read_whole_file(dir.str("missing.txt"), "--input"),
                       "cannot read --input " + dir.str("missing.txt") + ": No such file or directory");
  NANODDP_EXPECT_ERROR(read_whole_file(dir.str(), "--input"), "is a directory; give a file");
}

}  // namespace
}  // namespace nanoddp
