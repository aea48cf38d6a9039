// Device helpers shared by the flash kernels (attention_flash.cu, mma.sync) and the Hopper kernel
// (attention_hopper.cu, wgmma): the masks, the online softmax and the stores work on the same
// accumulator layout, a 16-row tile per warp with this thread holding rows g and g + 8 (g = lane / 4)
// and columns 8 j + 2 (lane % 4) + {0, 1} of each 8-column group j: mma.sync's m16n8 C fragment,
// and a warp's quarter of wgmma's m64nN accumulator.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/common.cuh"

namespace nanoddp::cuda::flash {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The causal, window and length masks, per row instead of per element: an element of a tile is visible
// when its column (0 .. width - 1) lies in a range [first, last]. tile_col gives position `pos` as
// a column of the tile starting at tile0, clamped to [-1, width] (which keeps every comparison
// with a column exact), so the 64-bit positions are handled once per row and tile and the inner
// loops compare 32-bit column numbers.
__device__ __forceinline__ int tile_col(int64_t pos, int64_t tile0, int width) {
  return static_cast<int>(max(int64_t{-1}, min(pos - tile0, int64_t{width})));
}

// Note [flash tiles in a window]: the query at position p sees keys p - window ..= p (ops.h); the
// kernels take no window as kNoWindow, so that p - window < 0 for every position and each bound
// below reduces to the full causal one (the same tiles, the same masks, the same bits). For a block
// of queries [m0, m1] the keys seen are [m0 - window, m1]; for a warp's 32 rows [w0, w0 + 31] the
// keys any row sees are [w0 - window, w0 + 31] and the keys every row sees [w0 + 31 - window, w0]
// (clipped to the sequence). A tile outside the first range is skipped, one inside the second runs
// unmasked, any other is masked per row. Rows can then meet a tile they see no key of after
// others of their warp have started, so the online softmax guards its running max against -inf.
// The dk/dv kernel turns the same band around: key j is seen by queries j ..= j + window.
constexpr int64_t kNoWindow = int64_t{1} << 40;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Two floats rounded to T as one 32-bit register, the first in the low half (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, f16_t>) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// The A operand of an m16n8k16 MMA from accumulators c[2kk], c[2kk+1] of two adjacent n-tiles:
// the C layout of a 16x16 block equals the A layout of a 16x16 operand.
template <typename T>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

// ldmatrix row addresses inside a shared tile with row stride SD (elements):

// Writes accumulator rows (this thread's rows `row` of a warp's 16-row tile, rr = 0: row g, rr =
// 1: row g + 8) as T, times `mul`: the first d columns (d a multiple of 8).
template <int HD, typename T>
__device__ __forceinline__ void store_rows(T* dst_row, const float (&acc)[HD / 8][4], int rr, int quad, float mul,
                                           int d) {
#pragma unroll
  for (int dt = 0; dt < HD / 8; dt++)
    if (dt * 8 < d)
      *reinterpret_cast<uint32_t*>(dst_row + dt * 8 + quad * 2) = pack2<T>(acc[dt][rr * 2] * mul,
                                                                           acc[dt][rr * 2 + 1] * mul);
}

// Folds one 16-row m-tile's raw scores s = Q K^T of a key tile into the running max and sum of its
// rows (this thread's rows g and g + 8: rr = 0, 1) and rescales its output accumulators o; s
// becomes P = 2^(scale_log2 s - max), base 2. Masked: row rr sees columns first[rr] ..= last[rr] of
// the tile.
template <bool Masked, int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&o)[DT][4], float (&row_max)[2],
                                               float (&row_sum)[2], const int (&first)[2], const int (&last)[2],
                                               int quad, float scale_log2) {
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < NT; j++) {
#pragma unroll
      for (int e = 0; e < 2; e++) {
        float& x = s[j][rr * 2 + e];
        const int col = j * 8 + quad * 2 + e;
        x = !Masked || (col >= first[rr] && col <= last[rr]) ? x * scale_log2 : -INFINITY;
        mx = fmaxf(mx, x);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // Without a window key 0 is visible to every row, so the max is finite from the first tile on;
    // with one a row may not have seen a key yet (Note [flash tiles in a window]): its max stays
    // -inf, and exponents taken from 0 instead give P = 0 and corr = 0 (o and the sum are still 0).
    const float new_max = fmaxf(row_max[rr], mx), base = new_max == -INFINITY ? 0.f : new_max;
    const float corr = exp2f(row_max[rr] - base);
    row_max[rr] = new_max;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < NT; j++) {
#pragma unroll
      for (int e = 0; e < 2; e++) {
        float& x = s[j][rr * 2 + e];
        x = exp2f(x - base);
        sum += x;
      }
    }
    row_sum[rr] = row_sum[rr] * corr + sum;
#pragma unroll
    for (int dt = 0; dt < DT; dt++) {
      o[dt][rr * 2] *= corr;
      o[dt][rr * 2 + 1] *= corr;
    }
  }
}

// Host side, for the flash and the Hopper launchers: raises Kernel's dynamic shared-memory limit to
// `bytes` (a constant per kernel) once per device: the attribute belongs to the kernel on a device,
// and setting it on every launch costs a driver call per launch. Devices past 64 are set on every
// launch.
template <auto Kernel>
cudaError_t set_smem(size_t bytes) {
  static std::atomic<uint64_t> done{0};  // bit d: set on device d
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes));
  if (e == cudaSuccess) done.fetch_or(bit, std::memory_order_release);
  return e;
}

}  // namespace nanoddp::cuda::flash
