// The distributed token loader.
//
// A split ("train" or "val") is the sequence of its shards. Each shard is cut into windows of
// T + 1 tokens starting every T tokens (a window's last token is the next one's first: inputs
// are window[0:T], targets window[1:T+1], as llm.c and nanochat slice their token streams).
// Windows are grouped into units of B windows (one micro-batch). An epoch visits the units in
// an order that is either sequential or a permutation seeded by (seed, epoch), like PyTorch's
// DistributedSampler; an epoch holds a whole number of optimizer steps, and the units left over
// are dropped (drop_last, by steps rather than by ranks: see epoch_units).
//
// Note [data order]: the loader keeps a global cursor over units. A rank takes unit
// cursor + rank and the cursor moves by the world size, so at every call the ranks read
// disjoint units, and world W with accumulation A reads, step by step, exactly the units that
// world 1 with accumulation W * A reads. That is what makes N ranks equal one rank with N
// accumulation steps, and lets a checkpoint restore the position exactly: {epoch, cursor}.
// It holds across epochs because both cut the epoch at the same place: after the last whole step
// of W * A units (LoaderOptions::step_units), a number that does not depend on how the step is
// divided among ranks. Cutting at a multiple of the world size instead (DistributedSampler's
// drop_last) lets one rank read unit 72 of 73 where two ranks drop it. A split that holds less than
// one step is cut at a multiple of the world size; only there do the two set-ups differ.
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
  // The units one optimizer step takes over all ranks, world * grad_accum: an epoch ends after its
  // last whole step (Note [data order]). 0: the world size, one unit per rank (evaluation).
  int64_t step_units = 0;
};

// The units an epoch reads, all ranks together, of a split of `units`: the most whole steps of
// step_units (0: world) units, or when not even one step fits, the most whole calls of `world`.
// step_units must be a multiple of world.
int64_t epoch_units(int64_t units, int world, int64_t step_units);

// Note [data order]'s rule, shared by every BatchSource: the global unit this rank reads next (before
// any shuffle). The cursor moves by the world size; a new epoch starts when the epoch's
// epoch_units(units, world, step_units) are read, so every rank takes the same number of units per
// epoch and an epoch holds whole steps.
int64_t take_unit(LoaderState& state, int64_t units, int rank, int world, int64_t step_units = 0);

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
  // The units an epoch reads, all ranks together (epoch_units: the dropped tail left out).
  virtual int64_t units_per_epoch() const = 0;
  // The tokens an epoch trains on: units_per_epoch() * B * T.
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
  int64_t units_per_epoch() const override { return epoch_units(units_, opts_.world, opts_.step_units); }
  int64_t tokens_per_epoch() const override { return units_per_epoch() * opts_.batch * opts_.seq; }

 private:
  void prepare_order();  // the unit order of state_.epoch

  LoaderOptions opts_;
  std::vector<ShardReader> shards_;
  std::vector<int64_t> window_start_;  // cumulative windows before each shard
  int64_t windows_ = 0, units_ = 0;    // units_: all of the split's, the dropped tail included
  std::vector<int64_t> order_;         // unit permutation of the current epoch (shuffle only)
  int64_t order_epoch_ = -1;
  LoaderState state_;
};

// Paths of a split's shards in `dir`, in order; throws when there are none.
std::vector<std::string> list_shards(const std::string& dir, const std::string& split);

}  // namespace nanoddp::data
