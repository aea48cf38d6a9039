// Byte-pair merging of one piece, by tiktoken's rule: start from single bytes; repeatedly merge the
// adjacent pair of parts whose concatenation has the lowest rank in the vocabulary (the leftmost
// such pair on a tie) until no adjacent concatenation is in the vocabulary; the piece's tokens are
// the ranks of the parts left.
//
// Two implementations of the same rule:
//  - bpe_merge_scan: rescans all pairs after each merge, O(n^2) for n bytes but with tiny
//    constants; the fast path for the short pieces that make up nearly all text.
//  - bpe_merge_heap: a min-heap of (rank, left offset) over a linked list of parts, O(n log n);
//    for long pieces (a megabyte of punctuation would take ~10^12 steps by scanning).
// bpe_merge picks by length; the tests check the two against each other.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "data/bytes_map.h"

namespace nanoddp::data {

// Reusable buffers of one thread, so that merging allocates nothing after warm-up.
struct MergeScratch {
  std::vector<uint32_t> bounds;     // scan: [parts + 1] byte offsets where the parts start (and the end)
  std::vector<uint32_t> pair_rank;  // scan: [parts - 1] rank of part i joined with part i + 1
  std::vector<uint32_t> next, prev; // heap: [n + 1] linked list of part starts, indexed by byte offset
  struct Candidate {
    uint32_t rank, left, right, end;  // parts [left, right) and [right, end) would merge into `rank`
  };
  std::vector<Candidate> heap;
};

inline constexpr uint32_t kNoRank = UINT32_MAX;
// Pieces longer than this many bytes are merged with the heap.
inline constexpr size_t kScanMergeMaxBytes = 256;

// Appends the tokens of `piece` (non-empty; every single byte must be in `ranks`) to `out`.
void bpe_merge_scan(const BytesMap& ranks, std::string_view piece, MergeScratch& scratch, std::vector<int32_t>& out);
void bpe_merge_heap(const BytesMap& ranks, std::string_view piece, MergeScratch& scratch, std::vector<int32_t>& out);

inline void bpe_merge(const BytesMap& ranks, std::string_view piece, MergeScratch& scratch, std::vector<int32_t>& out) {
  if (piece.size() <= kScanMergeMaxBytes)
    bpe_merge_scan(ranks, piece, scratch, out);
  else
    bpe_merge_heap(ranks, piece, scratch, out);
}

}  // namespace nanoddp::data
