// Caching allocators. Freed blocks go to a per-size-class free list and are handed out again
// instead of going back to the system: glibc maps buffers over 32 MB with mmap and unmaps them on
// free, and faulting those pages in again on every step costs 5-10x on these machines
// (shared/ANCHORS.md §4). Training allocates the same sizes every step, so after the first step
// every request is served from the cache.
//
// Size classes: 4 per power of two (x, 1.25x, 1.5x, 1.75x), so at most 25% of a block is slack.
//
// Every Tensor's Storage (core/tensor.cpp) gets its block through allocator_for(); the GPU
// benchmark reads stats() for peak memory. All methods are thread-safe (one mutex per allocator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/device.h"

namespace nanoddp {

// A snapshot taken under the allocator's lock. peak_live_bytes is the high-water mark of live_bytes
// since the allocator was created (never reset).
struct AllocatorStats {
  size_t live_bytes = 0;         // handed out and not yet freed (class-rounded sizes)
  size_t peak_live_bytes = 0;
  size_t cached_bytes = 0;       // held in free lists
  size_t system_bytes = 0;       // obtained from the system and not yet returned
  uint64_t system_allocs = 0;    // calls to the system allocator
  uint64_t cache_hits = 0;
};

// What Storage allocates and frees through; CachingAllocator serves the host and each GPU.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Never returns null for bytes > 0; throws nanoddp::Error when the system is out of memory.
  virtual void* allocate(size_t bytes) = 0;
  // `bytes` must be the size given to allocate(): the block is filed under that size's class.
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual AllocatorStats stats() const = 0;
  // Returns every cached block to the system.
  virtual void release_cached() = 0;
};

class CachingAllocator final : public Allocator {
 public:
  // The system calls are injected, so one caching scheme serves aligned_alloc on the host and
  // cudaMalloc on a GPU (core/cuda_util.cpp).
  using SystemAlloc = std::function<void*(size_t)>;  // returns null on failure
  using SystemFree = std::function<void(void*)>;

  CachingAllocator(std::string name, SystemAlloc sys_alloc, SystemFree sys_free);
  ~CachingAllocator() override;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  AllocatorStats stats() const override;
  void release_cached() override;

  // The class size a request of `bytes` is rounded up to (exposed for tests).
  static size_t class_size(size_t bytes);

 private:
  std::string name_;
  SystemAlloc sys_alloc_;
  SystemFree sys_free_;
  // Guards free_ and stats_: allocate() and deallocate() may be called from any thread.
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // class size -> free blocks
  AllocatorStats stats_;
};

// The process-wide allocator for a device (created on first use, never destroyed).
// Thread-safe. Throws nanoddp::Error for a CUDA device when this build has no CUDA.
Allocator& allocator_for(Device device);

}  // namespace nanoddp
