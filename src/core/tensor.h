// A dense, contiguous, row-major tensor: dtype, device, shape, and a shared storage block from the
// device's caching allocator. Views (reshape, row ranges, regions of a flat buffer) share storage;
// nothing is copied unless a function's name says so.
// Every layer above core passes Tensors: ops compute on them, DDP's gradients are views into flat
// bucket tensors, checkpoints write them.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace nanoddp {

class Shape {
 public:
  // Dims live in an inline array, not a vector: a Shape is copied with every view and must not allocate.
  static constexpr int kMaxDims = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  template <typename It>
  Shape(It begin, It end) {
    for (; begin != end; ++begin) push_back(*begin);
  }

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const;
  int64_t numel() const;
  void push_back(int64_t d);
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

// The memory a tensor views. Owns its block (from allocator_for(device)) unless made by wrap().
// Shared by every view of it (Tensor holds a shared_ptr): the block goes back to the allocator when
// the last view is gone.
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device;
  bool owned = true;

  Storage(size_t bytes, Device device);              // allocates
  Storage(void* ptr, size_t bytes, Device device);   // wraps memory owned by someone else
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

// A handle: copying a Tensor copies the view, never the elements (as in PyTorch).
class Tensor {
 public:
  Tensor() = default;

  // Uninitialised memory: from the caching allocator, so it may still hold an earlier tensor's values.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A view of memory owned elsewhere (must outlive the tensor).
  static Tensor wrap(void* ptr, const Shape& shape, DType dtype, Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  // Negative i counts from the last dimension, as in PyTorch.
  int64_t dim(int i) const { return shape_[i < 0 ? i + shape_.ndim() : i]; }
  int64_t numel() const { return shape_.numel(); }
  // An undefined tensor holds no bytes (its empty shape alone would read as one scalar element).
  size_t nbytes() const { return defined() ? static_cast<size_t>(numel()) * dtype_size(dtype_) : 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::cpu(); }
  bool shares_storage(const Tensor& o) const { return storage_ == o.storage_; }

  // Unchecked (no dtype): for byte copies and kernels that take void*. data<T>() checks the dtype.
  void* raw() const { return static_cast<char*>(storage_->ptr) + offset_; }
  template <typename T>
  T* data() const {
    NANODDP_ASSERT(defined() && dtype_ == dtype_of<T>(), "tensor is {}, accessed as {}", dtype_name(dtype_),
                   dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Same elements, another shape (numel must match).
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) of dim 0.
  Tensor rows(int64_t begin, int64_t end) const;
  // Elements [offset, offset + shape.numel()) of this tensor's flat element range, as `shape`.
  Tensor region(int64_t offset, const Shape& shape) const;

  // A new tensor with the same contents on `device` (explicit copy).
  Tensor copy_to(Device device) const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes from storage_->ptr
  Shape shape_;
  DType dtype_ = DType::F32;
};

// dst <- src: same dtype and numel, any devices. When it returns, src may be reused and dst read
// by the host or by anything queued after it on the device; a copy from ordinary (pageable) host
// memory to a GPU does not wait for the device itself.
void copy(const Tensor& dst, const Tensor& src);
// Sets every byte to zero.
// On a GPU the memset is queued on the compute stream and not waited for, unlike copy().
void zero(const Tensor& t);

}  // namespace nanoddp
