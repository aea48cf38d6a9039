// Host copies of a collective's device tensors for Gloo: see Note [staging] in comm/host_staging.h.
#include "comm/host_staging.h"

#include <cstdlib>
#include <cstring>

#include "core/allocator.h"
#include "core/error.h"
#include "nanoddp/build_config.h"

#if NANODDP_HAVE_CUDA
#include "core/cuda_util.h"
#endif

namespace nanoddp::dist {

namespace {

constexpr size_t kAlignment = 64;

size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

ReadyMark::ReadyMark(const Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return;
#if NANODDP_HAVE_CUDA
  cudaEvent_t e = nullptr;
  cuda::set_device(t.device().index);
  NANODDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  event_ = e;
  NANODDP_CUDA_CHECK(cudaEventRecord(e, cuda::compute_stream(t.device().index)));
#endif
}

ReadyMark::~ReadyMark() {
#if NANODDP_HAVE_CUDA
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
#endif
}

HostStaging::~HostStaging() {
  release();
#if NANODDP_HAVE_CUDA
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

void HostStaging::release() {
  if (buffer_ == nullptr) return;
#if NANODDP_HAVE_CUDA
  if (pinned_) {
    cudaFreeHost(buffer_);
    buffer_ = nullptr;
    return;
  }
#endif
  std::free(buffer_);
  buffer_ = nullptr;
}

// Grows the buffer to at least `bytes` (to the allocator's size class above it, so that slowly
// growing requests do not reallocate every time); page-locked once a device tensor is staged.
void HostStaging::reserve(size_t bytes, bool pinned) {
  if (bytes <= capacity_ && (pinned_ || !pinned)) return;
  const size_t size = std::max(CachingAllocator::class_size(bytes), capacity_);
  release();
  capacity_ = 0;
  pinned_ = pinned;
  allocations_++;
#if NANODDP_HAVE_CUDA
  if (pinned) {
    // Portable: page-locked for every device's context, whichever device this thread has current.
    NANODDP_CHECK(cudaHostAlloc(&buffer_, size, cudaHostAllocPortable) == cudaSuccess,
                  "could not page-lock {} bytes of host memory to stage a collective for gloo: free host memory, or "
                  "use the nccl backend", size);
    capacity_ = size;
    return;
  }
#endif
  buffer_ = std::aligned_alloc(kAlignment, size);
  NANODDP_CHECK(buffer_ != nullptr, "out of host memory staging a collective of {} bytes for gloo", bytes);
  capacity_ = size;
}

HostStaging::Views HostStaging::stage_in(const Tensor& data, const Tensor& input, const ReadyMark& ready) {
  const bool on_device = !data.device().is_cpu() || (input.defined() && !input.device().is_cpu());
  const size_t data_bytes = aligned(data.nbytes());
  reserve(std::max<size_t>(data_bytes + (input.defined() ? input.nbytes() : 0), 1), on_device);
  auto view = [&](const Tensor& like, size_t offset) {
    return Tensor::wrap(static_cast<char*>(buffer_) + offset, like.shape(), like.dtype());
  };
  Views v;
  v.data = view(data, 0);
  if (input.defined()) {
    v.input = view(input, data_bytes);
    copy_bytes(v.input, input, &ready);
  } else {
    copy_bytes(v.data, data, &ready);
  }
  return v;
}

void HostStaging::stage_out(const Tensor& data, const Views& views) { copy_bytes(data, views.data, nullptr); }

void HostStaging::copy_bytes(const Tensor& dst, const Tensor& src, const ReadyMark* ready) {
  if (src.nbytes() == 0) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return;
  }
#if NANODDP_HAVE_CUDA
  // On the staging stream, after the issue point's event: compute work issued since runs on.
  const int device = dst.device().is_cuda() ? dst.device().index : src.device().index;
  cuda::set_device(device);
  if (stream_ == nullptr) {
    cudaStream_t s = nullptr;
    NANODDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s;
    stream_device_ = device;
  }
  NANODDP_ASSERT(stream_device_ == device, "one gloo group staged tensors of cuda:{} and cuda:{}", stream_device_,
                 device);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  if (ready != nullptr && ready->event() != nullptr)
    NANODDP_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(ready->event()), 0));
  NANODDP_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault, stream));
  NANODDP_CUDA_CHECK(cudaStreamSynchronize(stream));
#else
  NANODDP_ASSERT(false, "a device tensor in a build without CUDA");
#endif
}

}  // namespace nanoddp::dist
