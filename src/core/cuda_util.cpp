#include "core/cuda_util.h"

#include <array>
#include <mutex>

#include "core/allocator.h"

namespace nanoddp::cuda {

namespace {
// Size of the per-device tables below: fixed arrays indexed by ordinal, so compute_stream() needs
// no lock once its stream exists. A larger ordinal is an assertion failure.
constexpr int kMaxDevices = 16;
}

cudaStream_t compute_stream(int device) {
  static std::array<cudaStream_t, kMaxDevices> streams{};
  static std::array<std::once_flag, kMaxDevices> once;
  NANODDP_ASSERT(device >= 0 && device < kMaxDevices);
  // call_once: the first calls may come from several threads at once.
  std::call_once(once[device], [&] {
    set_device(device);
    // Non-blocking: no implicit synchronisation with the legacy default stream that libraries may use.
    NANODDP_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
  });
  return streams[device];
}

void set_device(int device) { NANODDP_CUDA_CHECK(cudaSetDevice(device)); }

}  // namespace nanoddp::cuda

namespace nanoddp {

// Device memory: the same caching scheme as the host (see core/allocator.h). Blocks are reused
// across streams; callers that free a buffer still in use on another stream must synchronise first.
Allocator& cuda_allocator(int device) {
  static std::array<CachingAllocator*, cuda::kMaxDevices> allocators{};
  static std::mutex mu;
  NANODDP_ASSERT(device >= 0 && device < cuda::kMaxDevices);
  std::lock_guard lock(mu);
  if (allocators[device] == nullptr) {
    allocators[device] = new CachingAllocator(
        fmt::format("cuda:{}", device),
        [device](size_t n) -> void* {
          void* p = nullptr;
          // The calling thread may have another device current; cudaMalloc allocates on the current one.
          cuda::set_device(device);
          if (cudaMalloc(&p, n) != cudaSuccess) {
            // Clear the error so the next, unrelated CUDA call does not report it: the caller frees its cache
            // and retries (core/allocator.cpp).
            cudaGetLastError();
            return nullptr;
          }
          return p;
        },
        [device](void* p) {
          cuda::set_device(device);
          cudaFree(p);
        });
  }
  return *allocators[device];
}

}  // namespace nanoddp
