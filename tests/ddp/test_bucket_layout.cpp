// The bucket layout (ddp/bucket_layout.h): every parameter exactly once, reverse order, PyTorch's
// size caps, shards that divide, and Muon buckets holding whole same-shape matrices, one per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "ddp/bucket_layout.h"
#include "model/gpt.h"

namespace nanoddp::ddp {
namespace {

std::vector<ParamInfo> nanochat_params(int depth, bool muon) {
  model::GPT gpt(model::GPTConfig::from_depth(depth, 4096, 64), Device::cpu());
  std::vector<ParamInfo> out;
  for (auto& p : gpt.parameters()) out.push_back({p.name, p.data.shape(), muon && p.kind == model::ParamKind::Matrix});
  return out;
}

void check_common(const std::vector<ParamInfo>& params, const BucketLayout& l, const LayoutOptions& o) {
  std::set<int> seen;
  const int n = static_cast<int>(params.size());
  int last_ready = -1;
  for (size_t b = 0; b < l.buckets.size(); b++) {
    const Bucket& bk = l.buckets[b];
    int64_t end = 0, ready = 0;
    auto by_offset = bk.entries;  // Muon's slots go round, so a bucket's entries need not ascend
    std::sort(by_offset.begin(), by_offset.end(), [](const auto& x, const auto& y) { return x.offset < y.offset; });
    for (const auto& e : by_offset) {
      EXPECT_GE(e.offset, end) << "overlap in bucket " << b;
      end = e.offset + e.numel;
    }
    for (const auto& e : bk.entries) {
      EXPECT_TRUE(seen.insert(e.param).second) << params[e.param].name << " in two buckets";
      EXPECT_EQ(e.numel, params[e.param].shape.numel());
      EXPECT_EQ(l.bucket_of[e.param], static_cast<int>(b));
      EXPECT_EQ(l.offset_of[e.param], e.offset);
      ready = std::max<int64_t>(ready, n - 1 - e.param);
    }
    EXPECT_LE(end, bk.numel);
    if (o.sharded) {
      EXPECT_EQ(bk.numel % o.world_size, 0);
    }
    EXPECT_GE(ready, last_ready) << "bucket " << b << " completes before the previous one";
    last_ready = static_cast<int>(ready);
  }
  EXPECT_EQ(static_cast<int>(seen.size()), n);
}

TEST(BucketLayout, ReverseOrderWithPyTorchCaps) {
  auto params = nanochat_params(4, false);
  LayoutOptions o;  // 1 MiB first, 25 MiB after
  auto l = make_bucket_layout(params, o);
  check_common(params, l, o);
  // The first bucket starts with lm_head (the first gradient of the backward), which alone exceeds
  // 1 MiB (4096 x 256 x 4 bytes): it stays alone.
  ASSERT_FALSE(l.buckets.empty());
  EXPECT_EQ(params[l.buckets[0].entries[0].param].name, "lm_head.weight");
  EXPECT_EQ(l.buckets[0].entries.size(), 1u);
  for (size_t b = 1; b < l.buckets.size(); b++) {
    const auto& bk = l.buckets[b];
    if (bk.entries.size() > 1) {
      EXPECT_LE(bk.numel * 4, o.bucket_cap_bytes);
    }
    for (size_t i = 1; i < bk.entries.size(); i++) EXPECT_LT(bk.entries[i].param, bk.entries[i - 1].param);
  }
}

TEST(BucketLayout, ShardedBucketsPadToTheWorldAndMuonGetsWholeMatrices) {
  for (int world : {2, 3, 5}) {
    auto params = nanochat_params(3, true);
    LayoutOptions o;
    o.world_size = world;
    o.sharded = true;
    o.first_bucket_bytes = 64 << 10;
    o.bucket_cap_bytes = 256 << 10;
    auto l = make_bucket_layout(params, o);
    check_common(params, l, o);
    std::vector<int> owned(world, 0);  // Muon matrices per rank
    for (const auto& bk : l.buckets) {
      if (!bk.matrix_slots) {
        for (auto& e : bk.entries) EXPECT_FALSE(params[e.param].whole_matrix_owner);
        continue;
      }
      // Slot r = [r n, (r + 1) n) is exactly rank r's shard: one whole matrix (or padding).
      const Shape shape = params[bk.entries[0].param].shape;
      EXPECT_EQ(bk.numel, shape.numel() * world);
      EXPECT_LE(static_cast<int>(bk.entries.size()), world);
      std::vector<bool> taken(world, false);
      for (const auto& e : bk.entries) {
        EXPECT_EQ(params[e.param].shape, shape);
        const int r = static_cast<int>(e.offset / shape.numel());
        ASSERT_TRUE(r >= 0 && r < world);
        EXPECT_FALSE(taken[r]) << "two matrices in slot " << r;
        taken[r] = true;
        EXPECT_EQ(e.offset, bk.shard_begin(r, world));
        EXPECT_EQ(e.offset + e.numel, bk.shard_end(r, world));
        owned[r]++;
      }
    }
    // 3 layers of each matrix shape on 2, 3 or 5 ranks leaves partial buckets: they take turns, so
    // no rank owns more than one matrix above another (was: every leftover on the first ranks).
    const auto [fewest, most] = std::minmax_element(owned.begin(), owned.end());
    EXPECT_LE(*most - *fewest, 1) << "world " << world;
  }
}

}  // namespace
}  // namespace nanoddp::ddp
