// PyTorch's torch.utils.data.DistributedSampler, index for index, for a dataset of one's own (a
// PyTorch user's own data, without our shard format): each of num_replicas ranks gets a disjoint share of the indices 0..size-1 of one
// epoch, in an order seeded by seed + epoch when shuffling (set_epoch, as in PyTorch, must be
// called each epoch or every epoch has the same order).
//   drop_last = false: the indices are padded by repeating the first ones until they divide
//                      evenly, so every rank has ceil(size / num_replicas);
//   drop_last = true:  the tail that does not divide is dropped, floor(size / num_replicas) each.
// Rank r takes every num_replicas-th index starting at r.
//
// The shuffle is torch.randperm's with a torch.Generator seeded by seed + epoch (PyTorch 1.13 on
// the CPU): a Mersenne Twister (mt19937 of the seed's low 32 bits) driving a forward Fisher-Yates
// swap, r[i] <-> r[i + u % (n - i)]. Reproducing it bit for bit is what lets a PyTorch user move a
// training script over and see the same batches (tests/data/test_distributed_sampler.cpp checks it
// against python3-torch).
#pragma once

#include <cstdint>
#include <vector>

namespace nanoddp::data {

class DistributedSampler {
 public:
  // Throws nanoddp::Error for num_replicas < 1, a rank outside [0, num_replicas), or size < 0.
  DistributedSampler(int64_t size, int num_replicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // Indices this rank visits in the current epoch (num_samples() of them).
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t size_;
  int num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

// torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on the CPU.
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed);

}  // namespace nanoddp::data
