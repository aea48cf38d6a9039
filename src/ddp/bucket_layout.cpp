#include "ddp/bucket_layout.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace nanoddp::ddp {

namespace {

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Buckets of whole parameters, filled in gradient-ready order up to the byte caps; `replicated`
// ones are not padded for sharding (Note [small parameters]).
void add_capped_buckets(const std::vector<ParamInfo>& params, const std::vector<int>& order,
                        const LayoutOptions& opts, bool replicated, std::vector<Bucket>& out) {
  Bucket cur;
  int64_t cap = opts.first_bucket_bytes;
  auto close = [&] {
    if (cur.entries.empty()) return;
    cur.replicated = replicated;
    cur.numel = opts.sharded && !replicated ? round_up(cur.numel, opts.world_size) : cur.numel;
    out.push_back(std::move(cur));
    cur = Bucket{};
    cap = opts.bucket_cap_bytes;
  };
  for (int p : order) {
    const int64_t n = params[p].shape.numel();
    if (!cur.entries.empty() && (cur.numel + n) * 4 > cap) close();
    cur.entries.push_back({p, cur.numel, n});
    cur.numel += n;
  }
  close();
}

// Muon buckets: same-shape matrices, W per bucket, one slot per rank. A shape's last bucket may
// hold fewer than W; the slots go round across buckets (the next matrix takes the slot after the
// last one used), so those leftovers land on different ranks instead of all on the first ones: at
// depth 20 on 8 ranks, the 4 spare MLP matrices of each kind went to ranks 0-3 twice, a third more
// Newton-Schulz work on half the ranks.
void add_matrix_buckets(const std::vector<ParamInfo>& params, const std::vector<int>& order, int world,
                        std::vector<Bucket>& out) {
  int next_slot = 0;
  std::map<std::vector<int64_t>, std::vector<int>> by_shape;  // in first-ready order within a shape
  std::vector<std::vector<int64_t>> shape_order;
  for (int p : order) {
    std::vector<int64_t> key;
    for (int i = 0; i < params[p].shape.ndim(); i++) key.push_back(params[p].shape[i]);
    if (!by_shape.count(key)) shape_order.push_back(key);
    by_shape[key].push_back(p);
  }
  for (const auto& key : shape_order) {
    const auto& group = by_shape[key];
    for (size_t i = 0; i < group.size(); i += world) {
      Bucket b;
      b.matrix_slots = true;
      const int64_t n = params[group[i]].shape.numel();
      for (size_t j = i; j < std::min(group.size(), i + world); j++) {
        b.entries.push_back({group[j], static_cast<int64_t>(next_slot) * n, n});
        next_slot = (next_slot + 1) % world;
      }
      b.numel = n * world;
      out.push_back(std::move(b));
    }
  }
}

}  // namespace

BucketLayout make_bucket_layout(const std::vector<ParamInfo>& params, const LayoutOptions& opts) {
  NANODDP_ASSERT(opts.world_size >= 1 && opts.first_bucket_bytes > 0 && opts.bucket_cap_bytes > 0);
  const int n = static_cast<int>(params.size());
  std::vector<int> capped, small, matrices;  // each in gradient-ready order (reverse model order)
  for (int p = n - 1; p >= 0; p--) {
    const bool whole = opts.sharded && params[p].whole_matrix_owner;
    const bool replicate = opts.sharded && !whole && params[p].shape.numel() < opts.replicate_below_numel;
    (whole ? matrices : replicate ? small : capped).push_back(p);
  }
  std::vector<Bucket> buckets;
  add_capped_buckets(params, capped, opts, false, buckets);
  add_capped_buckets(params, small, opts, true, buckets);
  add_matrix_buckets(params, matrices, opts.world_size, buckets);

  // Launch order: by the ready position of each bucket's last parameter (Note [bucket order]).
  auto ready_pos = [&](const Bucket& b) {
    int last = 0;
    for (auto& e : b.entries) last = std::max(last, n - 1 - e.param);
    return last;
  };
  std::stable_sort(buckets.begin(), buckets.end(),
                   [&](const Bucket& a, const Bucket& b) { return ready_pos(a) < ready_pos(b); });

  BucketLayout layout;
  layout.bucket_of.assign(n, -1);
  layout.offset_of.assign(n, 0);
  for (size_t b = 0; b < buckets.size(); b++)
    for (auto& e : buckets[b].entries) {
      layout.bucket_of[e.param] = static_cast<int>(b);
      layout.offset_of[e.param] = e.offset;
    }
  layout.buckets = std::move(buckets);
  return layout;
}

}  // namespace nanoddp::ddp
