// Device-side helpers shared by the CUDA kernels of ops/cuda: element conversions, packed 16-byte
// accesses, warp and block reductions, and grid sizing. Kernels work on three storage types,
// float, __nv_bfloat16 (bf16) and __half (f16), and always compute in f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

using bf16_t = __nv_bfloat16;
using f16_t = __half;

// Calls f with a null pointer of the element type `t` names (bf16_t*, f16_t* or float*) and returns
// what f returns: the dtype dispatch of the kernel launchers, which take the type from the pointer.
template <typename F>
decltype(auto) with_dtype(DType t, F&& f) {
  if (t == DType::BF16) return f(static_cast<bf16_t*>(nullptr));
  if (t == DType::F16) return f(static_cast<f16_t*>(nullptr));
  return f(static_cast<float*>(nullptr));
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16_t x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(f16_t x) { return __half2float(x); }

// f32 -> storage type, rounding to nearest even (as core/dtype.h's f32_to_bf16 and f32_to_f16:
// beyond f16's range, inf).
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16_t from_f32<bf16_t>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ f16_t from_f32<f16_t>(float x) { return __float2half_rn(x); }

// x rounded to the storage type and back: the value a T tensor would hold.
template <typename T>
__device__ __forceinline__ float round_to(float x) { return to_f32(from_f32<T>(x)); }

// V consecutive elements moved as one access (V * sizeof(T) = 16 bytes for the vector path).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) { return *reinterpret_cast<const Pack<T, V>*>(p); }
template <typename T, int V>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, V>& x) { *reinterpret_cast<Pack<T, V>*>(p) = x; }

// Elements per 16-byte access.
template <typename T>
constexpr int kVec16 = 16 / sizeof(T);

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values. The order of additions is fixed, so the result is reproducible.
template <typename F>
__device__ __forceinline__ F block_sum(F x, F* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : F(0);
  return warp_sum(x);
}

// Maximum over the block, like block_sum.
__device__ __forceinline__ float block_max(float x, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(x);
}

// True when p is aligned to `bytes`.
__host__ __device__ __forceinline__ bool aligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than needed.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 4096) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

}  // namespace nanoddp::cuda
