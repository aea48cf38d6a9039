// RMSNorm, one warp per row: the warp sums x^2 (forward) or dy * y (backward) in f32 with a fixed
// reduction tree, then writes the row. Rows are a few hundred to a few thousand elements (model
// width, or head_dim for the QK norm), so a warp per row keeps every lane busy, and the second
// read of the row hits L1. Reads 16 bytes per lane when the row allows it.
#include "ops/cuda/common.cuh"
#include "ops/cuda/rmsnorm.cuh"

#include <initializer_list>
#include <type_traits>

namespace nanoddp::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

template <typename T, int V>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, const T* x, int64_t rows, int64_t c, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const T* xr = x + row * c;
  T* yr = y + row * c;
  float ss = 0.f;
  for (int64_t i = int64_t(lane) * V; i < c; i += 32 * V) {
    Pack<T, V> p = load_pack<T, V>(xr + i);
#pragma unroll
    for (int j = 0; j < V; j++) {
      const float v = to_f32(p.v[j]);
      ss += v * v;
    }
  }
  ss = warp_sum(ss);
  const float s = 1.f / sqrtf(ss / static_cast<float>(c) + eps);
  if (lane == 0) rstd[row] = s;
  for (int64_t i = int64_t(lane) * V; i < c; i += 32 * V) {
    Pack<T, V> p = load_pack<T, V>(xr + i);
#pragma unroll
    for (int j = 0; j < V; j++) p.v[j] = from_f32<T>(to_f32(p.v[j]) * s);
    store_pack<T, V>(yr + i, p);
  }
}

template <typename T, int V>
__global__ void rmsnorm_backward_kernel(T* dx, const T* dy, const T* y, const float* rstd, int64_t rows, int64_t c,
                                        bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const T* dyr = dy + row * c;
  const T* yr = y + row * c;
  T* dxr = dx + row * c;
  float dot = 0.f;
  for (int64_t i = int64_t(lane) * V; i < c; i += 32 * V) {
    Pack<T, V> a = load_pack<T, V>(dyr + i), b = load_pack<T, V>(yr + i);
#pragma unroll
    for (int j = 0; j < V; j++) dot += to_f32(a.v[j]) * to_f32(b.v[j]);
  }
  // Every lane has read all of its dy before any lane writes dx: the shuffles in warp_sum
  // synchronise the warp, so dx may alias dy.
  const float mean = warp_sum(dot) / static_cast<float>(c), s = rstd[row];
  for (int64_t i = int64_t(lane) * V; i < c; i += 32 * V) {
    Pack<T, V> a = load_pack<T, V>(dyr + i), b = load_pack<T, V>(yr + i), o;
    if (accumulate) o = load_pack<T, V>(dxr + i);
#pragma unroll
    for (int j = 0; j < V; j++) {
      const float g = s * (to_f32(a.v[j]) - to_f32(b.v[j]) * mean);
      o.v[j] = from_f32<T>(accumulate ? to_f32(o.v[j]) + g : g);
    }
    store_pack<T, V>(dxr + i, o);
  }
}

// 16-byte packs when the rows and pointers allow it, else single elements.
template <typename T>
bool can_vectorise(int64_t c, std::initializer_list<const void*> ptrs) {
  if (c % kVec16<T> != 0) return false;
  for (const void* p : ptrs)
    if (!aligned(p, 16)) return false;
  return true;
}

}  // namespace

cudaError_t launch_rmsnorm_forward(DType t, void* y, float* rstd, const void* x, int64_t rows, int64_t c, float eps,
                                   cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const int threads = 32 * kWarpsPerBlock;
  auto go = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (can_vectorise<T>(c, {y, x}))
      rmsnorm_forward_kernel<T, kVec16<T>><<<blocks, threads, 0, stream>>>(static_cast<T*>(y), rstd,
                                                                             static_cast<const T*>(x), rows, c, eps);
    else
      rmsnorm_forward_kernel<T, 1><<<blocks, threads, 0, stream>>>(static_cast<T*>(y), rstd,
                                                                   static_cast<const T*>(x), rows, c, eps);
  };
  with_dtype(t, go);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm_backward(DType t, void* dx, const void* dy, const void* y, const float* rstd, int64_t rows,
                                    int64_t c, bool accumulate, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const int threads = 32 * kWarpsPerBlock;
  auto go = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (can_vectorise<T>(c, {dx, dy, y}))
      rmsnorm_backward_kernel<T, kVec16<T>><<<blocks, threads, 0, stream>>>(
          static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(y), rstd, rows, c, accumulate);
    else
      rmsnorm_backward_kernel<T, 1><<<blocks, threads, 0, stream>>>(
          static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(y), rstd, rows, c, accumulate);
  };
  with_dtype(t, go);
  return cudaGetLastError();
}

}  // namespace nanoddp::cuda
