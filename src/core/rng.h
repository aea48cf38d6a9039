// Deterministic random numbers: xoshiro256** seeded through splitmix64. Every consumer derives its
// own stream from (seed, stream id), so results do not depend on the order things are initialised
// in, and the state is four words that checkpoints save and restore exactly.
// Users: model weight init (a stream per parameter), the data loader's shuffle (a stream per
// epoch) and sampling. Not thread-safe: each user owns its Rng.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace nanoddp {

class Rng {
 public:
  // Same (seed, stream), same sequence on every rank and platform: uniform() and normal() are ours,
  // not <random>'s distributions, whose output differs between standard libraries.
  Rng(uint64_t seed, uint64_t stream = 0);

  uint64_t next_u64();
  // Uniform in [0, 1) with 24 random bits.
  float uniform();
  // Standard normal (Box-Muller).
  float normal();

  // For checkpoints: set_state(state()) continues the sequence exactly.
  using State = std::array<uint64_t, 4>;
  State state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  State s_;
};

// The seed of stream `stream` under `seed`, for a consumer that takes a seed and makes its own
// Rng from it (model::generate, one sampled answer each): seed ^ (golden * (stream + 1)), which
// differs for every stream of a seed (the multiplier is odd) and is never the seed itself.
uint64_t stream_seed(uint64_t seed, uint64_t stream);

// A stable 64-bit id for a name (FNV-1a), used as an Rng stream id.
uint64_t stream_id(std::string_view name);

}  // namespace nanoddp
