// The bucket layout (ddp/bucket_layout.h): every parameter exactly once, reverse order, PyTorch's
// size caps, shards that divide, Muon buckets holding whole same-shape matrices, one per rank, and
// nanochat's small parameters replicated.
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
    if (o.sharded && !bk.replicated) {
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

// Note [small parameters]: nanochat's distributed AdamW (nanochat/optim.py, commit 92d63d4)
// all-reduces the AdamW tensors of fewer than 1024 elements. In its 2026 GPT (gpt.py's
// setup_optimizer groups) those are resid_lambdas and x0_lambdas ([n_layer]), the smear gate
// ([1, 24]) and the smear and backout lambdas ([1]); ve_gate is a block matrix (Muon), and wte,
// lm_head and the value embeddings are far larger.
TEST(BucketLayout, TheReplicatedParametersAreThoseNanochatAllReduces) {
  model::GPT gpt(model::GPTConfig::from_depth(4, 4096, 256, 64, 64, 0, model::Recipe::R2026, "SSSL"), Device::cpu());
  std::vector<ParamInfo> params;
  for (auto& p : gpt.parameters())
    params.push_back({p.name, p.data.shape(), p.kind == model::ParamKind::Matrix && p.data.shape().ndim() == 2});
  const std::set<std::string> nanochats = {"resid_lambdas", "x0_lambdas", "smear_gate.weight", "smear_lambda",
                                           "backout_lambda"};
  for (int world : {2, 3}) {
    LayoutOptions o;
    o.world_size = world;
    o.sharded = true;
    o.replicate_below_numel = 1024;
    const BucketLayout l = make_bucket_layout(params, o);
    check_common(params, l, o);
    std::set<std::string> replicated;
    int buckets = 0;
    for (const Bucket& b : l.buckets) {
      if (!b.replicated) continue;
      buckets++;
      for (const BucketEntry& e : b.entries) replicated.insert(params[e.param].name);
      EXPECT_EQ(b.numel, 2 * 4 + 24 + 2) << "a replicated bucket is not padded";
    }
    EXPECT_EQ(replicated, nanochats) << "world " << world;
    EXPECT_EQ(buckets, 1);  // 34 floats: one collective
    // Unsharded, every bucket is all-reduced and updated everywhere already: none is marked.
    o.sharded = false;
    for (const Bucket& b : make_bucket_layout(params, o).buckets) EXPECT_FALSE(b.replicated);
  }
  // The threshold is strict, as nanochat's numel() < 1024.
  LayoutOptions o;
  o.world_size = 2;
  o.sharded = true;
  o.replicate_below_numel = 1024;
  const std::vector<ParamInfo> edge = {{"below", Shape({1023}), false}, {"at", Shape({1024}), false}};
  for (const Bucket& b : make_bucket_layout(edge, o).buckets)
    for (const BucketEntry& e : b.entries) EXPECT_EQ(b.replicated, edge[e.param].name == "below");
}

}  // namespace
}  // namespace nanoddp::ddp
