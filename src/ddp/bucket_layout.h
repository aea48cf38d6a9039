// How parameters are laid out in flat buckets for gradient reduction and sharded optimizers.
//
// Note [bucket order]: backward produces gradients in reverse parameter order (lm_head first, wte
// last), so buckets are filled walking the parameters in reverse, like PyTorch's Reducer: the
// first bucket holds up to first_bucket_bytes (1 MiB: it starts reducing early), later ones up
// to bucket_cap_bytes (25 MiB). A parameter is never split across buckets. Buckets are then
// ordered by when they become complete; every rank computes the same layout from the same
// shapes, so collectives are launched in the same order everywhere.
//
// Note [shards]: with a sharded optimizer (--zero 1 or 2) every bucket's flat buffer is padded to
// a multiple of the world size W and rank r owns elements [r S, (r + 1) S), S = padded / W.
// AdamW is elementwise, so any slice of any parameter can be owned. Muon needs whole matrices
// (Newton-Schulz works on the full matrix): its parameters are grouped by shape and each bucket
// holds W matrices of one shape, one slot per rank (missing slots are zero padding). That is
// nanochat's DistMuon ownership, expressed as a bucket layout, except that the slots go round
// across buckets so that a shape's leftover matrices (fewer than W) fall on other ranks than the
// previous shape's: every rank owns the same number of matrices, give or take one.
//
// Note [small parameters]: nanochat's distributed AdamW all-reduces a tensor of fewer than 1024
// elements and updates all of it on every rank, and reduce-scatters the larger ones (its tensors
// must then divide by the world size along dim 0; our buckets are padded instead). We follow its
// rule under sharding: such parameters (the 2026 recipe's per-layer scalars, smear gate and
// lambdas) go into buckets of their own, marked replicated, that are not padded, are all-reduced
// even under --zero 2, and are updated whole by every rank with no all_gather after. AdamW is
// elementwise, so the update is the same arithmetic on the same averaged gradient; what changes is
// the communication: one all-reduce instead of a reduce-scatter and an all_gather (--zero 2) or
// an all-reduce and an all_gather (--zero 1), and no padding. docs/recipe2026.md gives the counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace nanoddp::ddp {

struct ParamInfo {
  std::string name;
  Shape shape;
  bool whole_matrix_owner;  // Muon under sharding: owned as a whole (see Note [shards])
};

struct BucketEntry {
  int param;       // index into the parameter list
  int64_t offset;  // first element in the bucket's flat buffer
  int64_t numel;
};

struct Bucket {
  std::vector<BucketEntry> entries;  // in the order their gradients become ready
  int64_t numel = 0;                 // padded length of the flat buffer
  bool matrix_slots = false;         // Muon bucket: slot r (entry offset r x matrix size) belongs to rank r
  bool replicated = false;           // small parameters, whole on every rank (Note [small parameters])
  // The elements rank r owns under sharding: all of a replicated bucket.
  int64_t shard_begin(int rank, int world) const { return replicated ? 0 : rank * (numel / world); }
  int64_t shard_end(int rank, int world) const { return replicated ? numel : (rank + 1) * (numel / world); }
};

struct LayoutOptions {
  int world_size = 1;
  bool sharded = false;                       // --zero >= 1
  int64_t first_bucket_bytes = 1 << 20;       // PyTorch's 1 MiB
  int64_t bucket_cap_bytes = 25 << 20;        // PyTorch's 25 MiB
  // Sharded: parameters of fewer elements than this, other than whole matrices, are replicated
  // (Note [small parameters]; nanochat's 1024). 0: none.
  int64_t replicate_below_numel = 0;
};

struct BucketLayout {
  std::vector<Bucket> buckets;  // in launch order
  std::vector<int> bucket_of;   // parameter index -> bucket
  std::vector<int64_t> offset_of;  // parameter index -> offset in its bucket
};

// params are in model order; their gradients become ready in reverse of it. Elements are f32.
BucketLayout make_bucket_layout(const std::vector<ParamInfo>& params, const LayoutOptions& opts);

}  // namespace nanoddp::ddp
