#include "data/distributed_sampler.h"

#include <numeric>
#include <random>

#include "core/error.h"

namespace nanoddp::data {

std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), 0);
  // PyTorch's CPU generator: mt19937 initialised from the seed's low 32 bits, one 32-bit draw per
  // swap (ATen's randperm_cpu).
  std::mt19937 engine(static_cast<uint32_t>(seed & 0xffffffffu));
  for (int64_t i = 0; i + 1 < n; i++) {
    const int64_t z = static_cast<int64_t>(static_cast<uint64_t>(engine()) % static_cast<uint64_t>(n - i));
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(z + i)]);
  }
  return r;
}

DistributedSampler::DistributedSampler(int64_t size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : size_(size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  NANODDP_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be at least 1 (got {})", num_replicas);
  NANODDP_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank {} is outside [0, {})", rank,
                num_replicas);
  NANODDP_CHECK(size >= 0, "DistributedSampler: the dataset size must not be negative (got {})", size);
  // PyTorch's rule: with drop_last and a remainder, ceil((size - R) / R) (= floor(size / R)) each.
  const int64_t r = num_replicas;
  num_samples_ = drop_last && size % r != 0 ? (size - r + r - 1) / r : (size + r - 1) / r;
  if (num_samples_ < 0) num_samples_ = 0;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = torch_randperm(size_, seed_ + static_cast<uint64_t>(epoch_));
  } else {
    all.resize(static_cast<size_t>(size_));
    std::iota(all.begin(), all.end(), 0);
  }
  const auto total = static_cast<size_t>(total_size());
  if (!drop_last_) {
    // Pad by repeating from the start (the whole list again as often as needed).
    const size_t n = all.size();
    for (size_t i = 0; all.size() < total && n > 0; i++) all.push_back(all[i % n]);
  } else {
    all.resize(total);
  }
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_)) mine.push_back(all[i]);
  return mine;
}

}  // namespace nanoddp::data
