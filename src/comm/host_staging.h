// Note [staging]: Gloo moves host memory only, so a collective on CUDA tensors runs on host copies,
// as PyTorch's Gloo backend does: where the collective is issued, an event marks the point in the
// compute stream after which its input is ready (the kernels that wrote it); the collective's
// thread copies the input from the device into page-locked host memory on a stream of its own
// once that event has passed (not waiting for compute work issued later, so the backward goes on),
// runs the CPU collective on the host copy, and copies the result back before its Work completes.
// wait() therefore blocks the host until the result is on the device, and kernels issued after it
// read the result. This is what lets a GPU machine without NCCL train with several processes, and
// several ranks share one GPU (NCCL refuses two ranks on one GPU).
//
// One page-locked buffer serves every collective of a group (they run one at a time): it grows to
// the largest collective's input and output and is then reused, since page-locking memory costs
// as much as a large copy. The same path runs for host tensors when asked (GlooGroupOptions::
// stage_host_tensors), so the CPU tests cover everything but the device copies themselves.
#pragma once

#include <cstddef>
#include <memory>

#include "core/tensor.h"

namespace nanoddp::dist {

// The point in a tensor's compute stream after which it is ready (a recorded CUDA event); empty
// for host tensors. Made on the thread that issues the collective.
class ReadyMark {
 public:
  ReadyMark() = default;
  explicit ReadyMark(const Tensor& t);
  ~ReadyMark();
  ReadyMark(const ReadyMark&) = delete;
  ReadyMark& operator=(const ReadyMark&) = delete;
  void* event() const { return event_; }

 private:
  void* event_ = nullptr;  // cudaEvent_t
};

class HostStaging {
 public:
  HostStaging() = default;
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Host views standing in for a collective's tensors, both in the one buffer: `data` for the
  // tensor the collective reads and writes (allreduce, broadcast) or writes (the output of
  // reduce_scatter and all_gather), `input` for the one it only reads (undefined when none).
  struct Views {
    Tensor data, input;
  };
  // Copies what the collective reads into the views: `input`'s contents when given, else `data`'s
  // (copied once `ready` has passed on the device). On the collective's thread.
  Views stage_in(const Tensor& data, const Tensor& input, const ReadyMark& ready);
  // Copies the result in `views.data` back to `data`.
  void stage_out(const Tensor& data, const Views& views);

  // Bytes of the buffer, and how many times it was (re)allocated (for tests).
  size_t capacity() const { return capacity_; }
  int allocations() const { return allocations_; }

 private:
  void reserve(size_t bytes, bool pinned);
  void release();
  // dst <- src, one of them in the buffer, the other on a device or the host.
  void copy_bytes(const Tensor& dst, const Tensor& src, const ReadyMark* ready);

  void* buffer_ = nullptr;
  size_t capacity_ = 0;
  bool pinned_ = false;    // cudaHostAlloc'd (else aligned_alloc'd)
  int allocations_ = 0;
  void* stream_ = nullptr;  // cudaStream_t of the copies, made on first use
  int stream_device_ = -1;
};

}  // namespace nanoddp::dist
