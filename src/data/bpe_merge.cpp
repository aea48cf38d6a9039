#include "data/bpe_merge.h"

#include <algorithm>

#include "core/error.h"

namespace nanoddp::data {

namespace {

uint32_t rank_of(const BytesMap& ranks, std::string_view bytes) {
  const uint32_t* r = ranks.find(bytes);
  return r != nullptr ? *r : kNoRank;
}

void emit_part(const BytesMap& ranks, std::string_view part, std::vector<int32_t>& out) {
  const uint32_t r = rank_of(ranks, part);
  NANODDP_ASSERT(r != kNoRank, "BPE part of {} bytes is not in the vocabulary (is every single byte a token?)",
                 part.size());
  out.push_back(static_cast<int32_t>(r));
}

}  // namespace

void bpe_merge_scan(const BytesMap& ranks, std::string_view piece, MergeScratch& s, std::vector<int32_t>& out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  // Parts are [bounds[i], bounds[i + 1]); pair_rank[i] ranks parts i and i + 1 joined.
  auto& bounds = s.bounds;
  auto& pair_rank = s.pair_rank;
  bounds.resize(n + 1);
  for (uint32_t i = 0; i <= n; i++) bounds[i] = i;
  pair_rank.resize(n > 0 ? n - 1 : 0);
  for (uint32_t i = 0; i + 1 < n; i++) pair_rank[i] = rank_of(ranks, piece.substr(i, 2));

  while (!pair_rank.empty()) {
    // The lowest rank, leftmost on ties (strict <).
    uint32_t best = kNoRank, at = 0;
    for (uint32_t i = 0; i < pair_rank.size(); i++)
      if (pair_rank[i] < best) best = pair_rank[i], at = i;
    if (best == kNoRank) break;
    // Merge parts `at` and `at + 1`: drop the boundary between them and the pair they formed.
    bounds.erase(bounds.begin() + at + 1);
    pair_rank.erase(pair_rank.begin() + at);
    const uint32_t parts = static_cast<uint32_t>(bounds.size()) - 1;
    if (at + 1 < parts)
      pair_rank[at] = rank_of(ranks, piece.substr(bounds[at], bounds[at + 2] - bounds[at]));
    if (at > 0)
      pair_rank[at - 1] = rank_of(ranks, piece.substr(bounds[at - 1], bounds[at + 1] - bounds[at - 1]));
  }
  for (size_t i = 0; i + 1 < bounds.size(); i++) emit_part(ranks, piece.substr(bounds[i], bounds[i + 1] - bounds[i]), out);
}

void bpe_merge_heap(const BytesMap& ranks, std::string_view piece, MergeScratch& s, std::vector<int32_t>& out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  // A part is named by its first byte offset; next[p] is where the following part starts (n at the
  // end), prev[p] where the preceding one starts. A removed part has next[p] == 0 (only part 0 can
  // legitimately start at 0, and its next is never 0).
  auto& next = s.next;
  auto& prev = s.prev;
  next.resize(n + 1);
  prev.resize(n + 1);
  for (uint32_t i = 0; i < n; i++) next[i] = i + 1, prev[i] = i - 1;  // prev[0] wraps; never read
  // Min-heap of candidate merges ordered by (rank, left): the lowest rank, leftmost on ties. A
  // candidate is stale when its parts no longer exist exactly as recorded.
  auto& heap = s.heap;
  heap.clear();
  auto later = [](const MergeScratch::Candidate& a, const MergeScratch::Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  auto push = [&](uint32_t left, uint32_t right, uint32_t end) {
    const uint32_t r = rank_of(ranks, piece.substr(left, end - left));
    if (r == kNoRank) return;
    heap.push_back({r, left, right, end});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (uint32_t i = 0; i + 1 < n; i++) push(i, i + 1, i + 2);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const auto c = heap.back();
    heap.pop_back();
    const bool left_alive = c.left == 0 || next[c.left] != 0;
    if (!left_alive || next[c.left] != c.right || next[c.right] != c.end) continue;  // stale
    // The right part joins the left one.
    next[c.left] = c.end;
    if (c.end < n) prev[c.end] = c.left;
    next[c.right] = 0;
    if (c.left > 0) push(prev[c.left], c.left, c.end);
    if (c.end < n) push(c.left, c.end, next[c.end]);
  }
  for (uint32_t p = 0; p < n; p = next[p]) emit_part(ranks, piece.substr(p, next[p] - p), out);
}

}  // namespace nanoddp::data
