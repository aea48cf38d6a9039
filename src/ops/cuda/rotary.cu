// Rotary embedding: one thread per rotated pair (x1[i], x2[i]) of a head vector, i < D/2. The
// pair is read, rotated in f32 by the angle of (position, i) and written by the same thread, so
// y may alias x. The inverse is the rotation by minus the angle (sin negated).
#include "ops/cuda/common.cuh"
#include "ops/cuda/rotary.cuh"

#include <type_traits>

namespace nanoddp::cuda {

namespace {

// I is the index type: 32-bit unless the tensor is too large for it (index division is the
// kernel's main arithmetic cost).
template <typename T, typename I>
__global__ void rotary_kernel(T* y, const T* x, const float* cos, const float* sin, I pairs, I seq, I heads, I half,
                              int64_t pos0, float sign) {
  const I stride = I(gridDim.x) * blockDim.x;
  for (I p = I(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    // p enumerates [B, T, H, half]: the vector (b, t, h) and the pair index i.
    const I i = p % half, vec = p / half, t = (vec / heads) % seq;
    const int64_t base = int64_t(vec) * 2 * half;
    const float x1 = to_f32(x[base + i]), x2 = to_f32(x[base + i + half]);
    const float c = cos[(pos0 + t) * half + i], s = sign * sin[(pos0 + t) * half + i];
    y[base + i] = from_f32<T>(x1 * c + x2 * s);
    y[base + i + half] = from_f32<T>(-x1 * s + x2 * c);
  }
}

}  // namespace

cudaError_t launch_rotary(DType t, void* y, const void* x, const float* cos, const float* sin, int64_t batch,
                          int64_t seq, int64_t heads, int64_t d, int64_t pos0, bool inverse, cudaStream_t stream) {
  const int64_t half = d / 2, pairs = batch * seq * heads * half;
  if (pairs == 0) return cudaSuccess;
  const float sign = inverse ? -1.f : 1.f;
  constexpr int kThreads = 256;
  const unsigned blocks = grid_for(pairs, kThreads, 16384);
  auto go = [&](auto* tag, auto index) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using I = decltype(index);
    rotary_kernel<T, I><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), cos, sin,
                                                         I(pairs), I(seq), I(heads), I(half), pos0, sign);
  };
  const bool small = pairs < (int64_t{1} << 31);
  with_dtype(t, [&](auto* tag) { small ? go(tag, uint32_t{}) : go(tag, int64_t{}); });
  return cudaGetLastError();
}

}  // namespace nanoddp::cuda
