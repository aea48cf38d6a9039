// The distributed token loader.
//
// A split ("train" or "val") is the sequence of its shards. Each shard is cut into windows of
// T + 1 tokens starting every T tokens (a window's last token is the next one's first: inputs
// are window[0:T], targets window[1:T+1], as llm.c and nanochat slice their token streams).
// Windows are grouped into units of B windows (one micro-batch). An epoch visits the units in
// an order that is either sequential or a permutation seeded by (seed, epoch), like PyTorch's
// DistributedSampler; units left over when the epoch does not divide are dropped (drop_last).
//
// Note [data order]: the loader keeps a global cursor over units. A rank takes unit
// cursor + rank and the cursor moves by the world size, so at every call the ranks read
// disjoint units, and world W with accumulation A reads, step by step, exactly the units that
// world 1 with accumulation W * A reads. That is what makes N ranks equal one rank with N
// accumulation steps, and lets a checkpoint restore the position exactly: {epoch, cursor}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/shard.h"

namespace nanoddp::data {

struct LoaderState {
  int64_t epoch = 0;
  int64_t cursor = 0;  // next global unit within the epoch
  bool operator==(const LoaderState&) const = default;
};

struct LoaderOptions {
  int64_t batch = 1, seq = 1;
  int rank = 0, world = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  // Tokens must lie in [0, vocab_size): a shard of another tokenizer, or a corrupt one, is reported
  // here with its file and position instead of as an id outside the model's padded vocabulary
  // deep inside a kernel. 0: not checked.
  int64_t vocab_size = 0;
};

// Note [data order]'s rule, shared by every BatchSource: the global unit this rank reads next (before
// any shuffle). The cursor moves by the world size; a new epoch starts when fewer than `world` units
// are left, so every rank takes the same number of units per epoch.
int64_t take_unit(LoaderState& state, int64_t units, int rank, int world);

// The order of n items in `epoch`: 0..n-1, or with shuffle a permutation seeded by (seed, the
// stream named `what`, epoch), the same on every rank. Shared by the loaders and RL's questions.
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, const char* what, int64_t epoch);

// Where the trainer's micro-batches come from: token shards (TokenLoader) or rendered
// conversations (ConversationLoader, data/conversation_loader.h). Both keep a global cursor over
// units of B rows that ranks take in turn (Note [data order]), so a position is {epoch, cursor}.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills inputs and targets, i32 [B, T] on the host, with this rank's next unit; a target of -1
  // is not trained on.
  virtual void next(Tensor& inputs, Tensor& targets) = 0;
  virtual LoaderState state() const = 0;
  virtual void set_state(const LoaderState& s) = 0;
  virtual int64_t units_per_epoch() const = 0;
  virtual int64_t tokens_per_epoch() const = 0;
};

class TokenLoader final : public BatchSource {
 public:
  // The shards of `split` in `dir`: split_000000.bin, split_000001.bin, ... (at least one).
  TokenLoader(const std::string& dir, const std::string& split, const LoaderOptions& opts);

  // Fills inputs and targets, i32 [B, T] on the host, with this rank's next unit.
  void next(Tensor& inputs, Tensor& targets) override;

  LoaderState state() const override { return state_; }
  void set_state(const LoaderState& s) override { state_ = s; order_epoch_ = -1; }
  int64_t units_per_epoch() const override { return units_; }
  // The tokens an epoch trains on: the units every rank can take in lockstep (take_unit's drop_last).
  int64_t tokens_per_epoch() const override { return units_ / opts_.world * opts_.world * opts_.batch * opts_.seq; }

 private:
  void prepare_order();  // the unit order of state_.epoch

  LoaderOptions opts_;
  std::vector<ShardReader> shards_;
  std::vector<int64_t> window_start_;  // cumulative windows before each shard
  int64_t windows_ = 0, units_ = 0;
  std::vector<int64_t> order_;         // unit permutation of the current epoch (shuffle only)
  int64_t order_epoch_ = -1;
  LoaderState state_;
};

// Paths of a split's shards in `dir`, in order; throws when there are none.
std::vector<std::string> list_shards(const std::string& dir, const std::string& split);

}  // namespace nanoddp::data
