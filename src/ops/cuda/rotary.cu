// Rotary embedding: one thread per V consecutive rotated pairs (x1[i], x2[i]) of a head vector,
// i < D/2, V = 16 bytes of T where the half head allows it (8 in bf16 and f16), else 1. The pairs
// are read, rotated in f32 by the angles of (position, i) and written by the same thread, so y
// may alias x. The inverse is the rotation by minus the angle (sin negated).
// Why V: one element per thread made 2-byte loads and stores, and the H200 ran the kernel at
// about 1.7 TB/s of its 4.3 (7.9 ms of a depth-20 step; docs/benchmarks.md); 16-byte accesses are
// what the other elementwise kernels use. The arithmetic per element is unchanged.
#include "ops/cuda/common.cuh"
#include "ops/cuda/rotary.cuh"

#include <type_traits>

namespace nanoddp::cuda {

namespace {

// I is the index type: 32-bit unless the tensor is too large for it (index division is the
// kernel's main arithmetic cost).
template <typename T, typename I, int V>
__global__ void rotary_kernel(T* y, const T* x, const float* cos, const float* sin, I groups, I seq, I heads, I half,
                              int64_t pos0, float sign) {
  const I per_vec = half / V, stride = I(gridDim.x) * blockDim.x;
  for (I p = I(blockIdx.x) * blockDim.x + threadIdx.x; p < groups; p += stride) {
    // p enumerates [B, T, H, half / V]: the vector (b, t, h) and its pairs i0 .. i0 + V - 1.
    const I i0 = (p % per_vec) * V, vec = p / per_vec, t = (vec / heads) % seq;
    const int64_t base = int64_t(vec) * 2 * half + i0, angle = (pos0 + t) * half + i0;
    const Pack<T, V> a = load_pack<T, V>(x + base), b = load_pack<T, V>(x + base + half);
    float c[V], s[V];
    if constexpr (V % 4 == 0) {
#pragma unroll
      for (int j = 0; j < V; j += 4) {  // the angle tables are f32: 16 bytes are 4 of them
        const Pack<float, 4> cv = load_pack<float, 4>(cos + angle + j), sv = load_pack<float, 4>(sin + angle + j);
#pragma unroll
        for (int e = 0; e < 4; e++) {
          c[j + e] = cv.v[e];
          s[j + e] = sv.v[e];
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; j++) {
        c[j] = cos[angle + j];
        s[j] = sin[angle + j];
      }
    }
    Pack<T, V> ya, yb;
#pragma unroll
    for (int j = 0; j < V; j++) {
      const float x1 = to_f32(a.v[j]), x2 = to_f32(b.v[j]), sj = sign * s[j];
      ya.v[j] = from_f32<T>(x1 * c[j] + x2 * sj);
      yb.v[j] = from_f32<T>(-x1 * sj + x2 * c[j]);
    }
    store_pack<T, V>(y + base, ya);
    store_pack<T, V>(y + base + half, yb);
  }
}

}  // namespace

cudaError_t launch_rotary(DType t, void* y, const void* x, const float* cos, const float* sin, int64_t batch,
                          int64_t seq, int64_t heads, int64_t d, int64_t pos0, bool inverse, cudaStream_t stream) {
  const int64_t half = d / 2, pairs = batch * seq * heads * half;
  if (pairs == 0) return cudaSuccess;
  const float sign = inverse ? -1.f : 1.f;
  constexpr int kThreads = 256;
  auto go = [&](auto* tag, auto index, auto vec) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using I = decltype(index);
    constexpr int V = decltype(vec)::value;
    const unsigned blocks = grid_for(pairs / V, kThreads, 16384);
    rotary_kernel<T, I, V><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), cos, sin,
                                                            I(pairs / V), I(seq), I(heads), I(half), pos0, sign);
  };
  const bool small = pairs < (int64_t{1} << 31);
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    constexpr int V = kVec16<T>;
    // 16-byte accesses need every vector's pairs, and each table row, to start on 16 bytes.
    const bool vector = half % V == 0 && aligned(x, 16) && aligned(y, 16) && aligned(cos, 16) && aligned(sin, 16);
    auto run = [&](auto index) {
      if (vector)
        go(tag, index, std::integral_constant<int, V>{});
      else
        go(tag, index, std::integral_constant<int, 1>{});
    };
    small ? run(uint32_t{}) : run(int64_t{});
  });
  return cudaGetLastError();
}

}  // namespace nanoddp::cuda
