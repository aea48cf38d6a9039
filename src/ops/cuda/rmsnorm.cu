// RMSNorm, L lanes per row (a warp, or a part of one for short rows): the lanes sum x^2 (forward)
// or dy * y (backward) in f32 with a fixed reduction tree, then write the row. Rows are a few
// hundred to a few thousand elements (model width, or head_dim for the QK norm), and the second
// read of the row hits L1. Reads 16 bytes per lane when the row allows it. A QK-norm row of 128
// bf16 elements is 16 such reads: a warp per row left half its lanes idle, so such rows take 16
// lanes each, two rows a warp. The tree over L lanes adds in the same order as the warp's did over
// a row whose lanes past L held zeros, so the results are the same bits.
#include "ops/cuda/common.cuh"
#include "ops/cuda/rmsnorm.cuh"

#include <initializer_list>
#include <type_traits>

namespace nanoddp::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// The sum over the L lanes of a row (L a power of two up to 32; the warp's rows are lanes
// [0, L), [L, 2L), ...).
template <int L>
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Row of this lane's group and the lane's place in it; a group past the last row computes on
// nothing (the shuffles need every lane of the warp) and writes nothing.
template <int L>
__device__ __forceinline__ int64_t group_row(int& lane) {
  const int l = threadIdx.x & 31;
  lane = l & (L - 1);
  return (int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * (32 / L) + l / L;
}

template <typename T, int V, int L>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, const T* x, int64_t rows, int64_t c, float eps) {
  int lane = 0;
  const int64_t row = group_row<L>(lane);
  const int64_t n = row < rows ? c : 0;  // the elements this group reads
  const int64_t at = n > 0 ? row * c : 0;
  const T* xr = x + at;
  T* yr = y + at;
  float ss = 0.f;
  for (int64_t i = int64_t(lane) * V; i < n; i += L * V) {
    Pack<T, V> p = load_pack<T, V>(xr + i);
#pragma unroll
    for (int j = 0; j < V; j++) {
      const float v = to_f32(p.v[j]);
      ss += v * v;
    }
  }
  ss = row_sum<L>(ss);
  const float s = 1.f / sqrtf(ss / static_cast<float>(c) + eps);
  if (lane == 0 && n > 0) rstd[row] = s;
  for (int64_t i = int64_t(lane) * V; i < n; i += L * V) {
    Pack<T, V> p = load_pack<T, V>(xr + i);
#pragma unroll
    for (int j = 0; j < V; j++) p.v[j] = from_f32<T>(to_f32(p.v[j]) * s);
    store_pack<T, V>(yr + i, p);
  }
}

template <typename T, int V, int L>
__global__ void rmsnorm_backward_kernel(T* dx, const T* dy, const T* y, const float* rstd, int64_t rows, int64_t c,
                                        bool accumulate) {
  int lane = 0;
  const int64_t row = group_row<L>(lane);
  const int64_t n = row < rows ? c : 0;  // the elements this group reads
  const int64_t at = n > 0 ? row * c : 0;
  const T* dyr = dy + at;
  const T* yr = y + at;
  T* dxr = dx + at;
  float dot = 0.f;
  for (int64_t i = int64_t(lane) * V; i < n; i += L * V) {
    Pack<T, V> a = load_pack<T, V>(dyr + i), b = load_pack<T, V>(yr + i);
#pragma unroll
    for (int j = 0; j < V; j++) dot += to_f32(a.v[j]) * to_f32(b.v[j]);
  }
  // Every lane has read all of its dy before any lane writes dx: the shuffles in row_sum
  // synchronise the warp, so dx may alias dy.
  const float mean = row_sum<L>(dot) / static_cast<float>(c), s = n > 0 ? rstd[row] : 0.f;
  for (int64_t i = int64_t(lane) * V; i < n; i += L * V) {
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

// Lanes per row for a row of c elements read V at a time: the reads rounded up to a power of two,
// from 8 to 32.
int lanes_per_row(int64_t c, int v) {
  const int64_t reads = (c + v - 1) / v;
  return reads > 16 ? 32 : reads > 8 ? 16 : 8;
}

// Runs go(V, L) with the vector width and lanes per row as compile-time constants.
template <typename T, typename F>
void with_row_layout(int64_t c, bool vector, F&& go) {
  constexpr int V16 = kVec16<T>;
  auto lanes = [&](auto v) {
    switch (lanes_per_row(c, decltype(v)::value)) {
      case 8: return go(v, std::integral_constant<int, 8>{});
      case 16: return go(v, std::integral_constant<int, 16>{});
      default: return go(v, std::integral_constant<int, 32>{});
    }
  };
  if (vector)
    lanes(std::integral_constant<int, V16>{});
  else
    lanes(std::integral_constant<int, 1>{});
}

// Blocks for `rows` rows at L lanes a row, kWarpsPerBlock warps a block.
unsigned row_blocks(int64_t rows, int lanes) {
  const int64_t per_block = int64_t(kWarpsPerBlock) * (32 / lanes);
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

}  // namespace

cudaError_t launch_rmsnorm_forward(DType t, void* y, float* rstd, const void* x, int64_t rows, int64_t c, float eps,
                                   cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    with_row_layout<T>(c, can_vectorise<T>(c, {y, x}), [&](auto v, auto l) {
      constexpr int V = decltype(v)::value, L = decltype(l)::value;
      rmsnorm_forward_kernel<T, V, L><<<row_blocks(rows, L), 32 * kWarpsPerBlock, 0, stream>>>(
          static_cast<T*>(y), rstd, static_cast<const T*>(x), rows, c, eps);
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm_backward(DType t, void* dx, const void* dy, const void* y, const float* rstd, int64_t rows,
                                    int64_t c, bool accumulate, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    with_row_layout<T>(c, can_vectorise<T>(c, {dx, dy, y}), [&](auto v, auto l) {
      constexpr int V = decltype(v)::value, L = decltype(l)::value;
      rmsnorm_backward_kernel<T, V, L><<<row_blocks(rows, L), 32 * kWarpsPerBlock, 0, stream>>>(
          static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(y), rstd, rows, c, accumulate);
    });
  });
  return cudaGetLastError();
}

}  // namespace nanoddp::cuda
