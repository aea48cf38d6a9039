#include "core/tensor.h"

#include <cstring>

#include "core/allocator.h"
#include "nanoddp/build_config.h"

#if NANODDP_HAVE_CUDA
#include "core/cuda_util.h"
#endif

namespace nanoddp {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) push_back(d);
}

int64_t Shape::operator[](int i) const {
  NANODDP_ASSERT(i >= 0 && i < ndim_, "dim {} of a {}-d shape", i, ndim_);
  return dims_[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; i++) n *= dims_[i];
  return n;
}

void Shape::push_back(int64_t d) {
  NANODDP_ASSERT(ndim_ < kMaxDims && d >= 0, "bad shape dim {}", d);
  dims_[ndim_++] = d;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; i++)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; i++) s += fmt::format("{}{}", i ? ", " : "", dims_[i]);
  return s + "]";
}

Storage::Storage(size_t n, Device d) : ptr(allocator_for(d).allocate(n)), bytes(n), device(d) {}

Storage::Storage(void* p, size_t n, Device d) : ptr(p), bytes(n), device(d), owned(false) {}

Storage::~Storage() {
  if (owned) allocator_for(device).deallocate(ptr, bytes);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), device);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  zero(t);
  return t;
}

Tensor Tensor::wrap(void* ptr, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>(ptr, static_cast<size_t>(shape.numel()) * dtype_size(dtype), device);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  NANODDP_ASSERT(shape.numel() == numel(), "view {} of a {} tensor", shape.str(), shape_.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  NANODDP_ASSERT(ndim() >= 1 && 0 <= begin && begin <= end && end <= dim(0), "rows [{}, {}) of {}", begin, end,
                 shape_.str());
  Shape s;
  s.push_back(end - begin);
  for (int i = 1; i < ndim(); i++) s.push_back(dim(i));
  // Elements per row; a tensor with no rows has none (and no division by zero).
  int64_t row = ndim() >= 1 && dim(0) > 0 ? numel() / dim(0) : 0;
  return region(begin * row, s);
}

Tensor Tensor::region(int64_t offset, const Shape& shape) const {
  NANODDP_ASSERT(offset >= 0 && offset + shape.numel() <= numel(), "region [{}, +{}) of {} elements", offset,
                 shape.numel(), numel());
  Tensor t = *this;
  t.offset_ = offset_ + static_cast<size_t>(offset) * dtype_size(dtype_);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::copy_to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  copy(t, *this);
  return t;
}

void copy(const Tensor& dst, const Tensor& src) {
  NANODDP_ASSERT(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "copy {} {} <- {} {}",
                 dtype_name(dst.dtype()), dst.shape().str(), dtype_name(src.dtype()), src.shape().str());
  if (src.nbytes() == 0 || dst.raw() == src.raw()) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    // memmove: dst and src may be overlapping views of one storage.
    std::memmove(dst.raw(), src.raw(), src.nbytes());
    return;
  }
#if NANODDP_HAVE_CUDA
  // cudaMemcpyDefault takes the direction from the pointers (unified addressing). Queued on the
  // compute stream so it follows the kernels already issued there (and every later kernel, and
  // every collective, which waits for that stream, follows it).
  int dev = dst.device().is_cuda() ? dst.device().index : src.device().index;
  cudaStream_t stream = cuda::compute_stream(dev);
  NANODDP_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault, stream));
  // From pageable host memory to the device, the driver has staged the source by the time
  // cudaMemcpyAsync returns (CUDA's "API synchronization behavior"), so the caller may reuse it and
  // the host need not wait: a training step's token ids and targets no longer stall the host at
  // the start of each micro-step. Pinned host memory is read by the DMA later,
  // and every copy towards the host must have landed before the caller reads it: those wait.
  if (src.device().is_cpu() && dst.device().is_cuda()) {
    cudaPointerAttributes attr{};
    NANODDP_CUDA_CHECK(cudaPointerGetAttributes(&attr, src.raw()));
    if (attr.type == cudaMemoryTypeUnregistered) return;
  }
  NANODDP_CUDA_CHECK(cudaStreamSynchronize(stream));
#else
  // A bug, not a user error: allocator_for() already refuses CUDA devices in such a build.
  NANODDP_ASSERT(false, "CUDA tensor in a build without CUDA");
#endif
}

void zero(const Tensor& t) {
  if (t.nbytes() == 0) return;
  if (t.device().is_cpu()) {
    std::memset(t.raw(), 0, t.nbytes());
    return;
  }
#if NANODDP_HAVE_CUDA
  // Not waited for: kernels that read t run later on the same stream.
  NANODDP_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), cuda::compute_stream(t.device().index)));
#endif
}

}  // namespace nanoddp
