#include "core/allocator.h"

#include <bit>
#include <cstdlib>

#include "core/error.h"
#include "nanoddp/build_config.h"

namespace nanoddp {

namespace {
constexpr size_t kAlignment = 64;  // a cache line, and enough for every AVX-512 load
}

CachingAllocator::CachingAllocator(std::string name, SystemAlloc sys_alloc, SystemFree sys_free)
    : name_(std::move(name)), sys_alloc_(std::move(sys_alloc)), sys_free_(std::move(sys_free)) {}

CachingAllocator::~CachingAllocator() { release_cached(); }

size_t CachingAllocator::class_size(size_t bytes) {
  if (bytes <= kAlignment) return kAlignment;
  // Top power of two at or below `bytes`, then the quarter step that covers it.
  size_t pow2 = std::bit_floor(bytes);
  size_t quarter = pow2 / 4;
  // Below 256 bytes a quarter step would be finer than the alignment: use 64-byte steps instead.
  // Either way every class size is a multiple of kAlignment, as aligned_alloc requires.
  if (quarter < kAlignment) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return (bytes + quarter - 1) / quarter * quarter;
}

void* CachingAllocator::allocate(size_t bytes) {
  // Zero-element tensors own no block; deallocate() ignores the null they hold.
  if (bytes == 0) return nullptr;
  size_t size = class_size(bytes);
  std::lock_guard lock(mu_);
  auto& list = free_[size];
  void* ptr = nullptr;
  if (!list.empty()) {
    ptr = list.back();
    list.pop_back();
    stats_.cached_bytes -= size;
    stats_.cache_hits++;
  } else {
    ptr = sys_alloc_(size);
    if (ptr == nullptr) {
      // Give the cache back and try once more before failing.
      for (auto& [cls, blocks] : free_) {
        for (void* p : blocks) sys_free_(p);
        stats_.system_bytes -= cls * blocks.size();
        blocks.clear();
      }
      stats_.cached_bytes = 0;
      ptr = sys_alloc_(size);
    }
    NANODDP_CHECK(ptr != nullptr, "out of {} memory: could not allocate {:.1f} MiB ({:.1f} MiB in use); "
                  "use a smaller --device_batch_size or model", name_, size / 1048576.0,
                  stats_.live_bytes / 1048576.0);
    stats_.system_bytes += size;
    stats_.system_allocs++;
  }
  stats_.live_bytes += size;
  if (stats_.live_bytes > stats_.peak_live_bytes) stats_.peak_live_bytes = stats_.live_bytes;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  size_t size = class_size(bytes);
  std::lock_guard lock(mu_);
  NANODDP_ASSERT(stats_.live_bytes >= size, "{}: freeing more than was allocated", name_);
  // Kept, not returned: the next step asks for the same sizes (see the header). Only
  // release_cached() and an allocation failure give cached blocks back to the system.
  free_[size].push_back(ptr);
  stats_.live_bytes -= size;
  stats_.cached_bytes += size;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mu_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) sys_free_(p);
    stats_.system_bytes -= size * blocks.size();
  }
  free_.clear();
  stats_.cached_bytes = 0;
}

#if NANODDP_HAVE_CUDA
// Defined with the CUDA code, so that this file needs no CUDA headers.
Allocator& cuda_allocator(int device);  // core/cuda_util.cpp
#endif

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) {
    // Leaked on purpose: tensors held by static objects may be freed after main returns.
    static auto* cpu = new CachingAllocator(
        "host", [](size_t n) { return std::aligned_alloc(kAlignment, n); }, [](void* p) { std::free(p); });
    return *cpu;
  }
#if NANODDP_HAVE_CUDA
  return cuda_allocator(device.index);
#else
  NANODDP_FAIL("device {} requested, but this build of nanoddp has no CUDA support; rebuild with CUDA or use "
               "--device cpu", device.str());
#endif
}

}  // namespace nanoddp
