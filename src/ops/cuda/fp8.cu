// amax and quantization kernels of matmul_fp8. The rounding is ops/fp8_math.h's, compiled for the
// device here and for the host in the CPU emulation and the tests, so both give the same codes.
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/fp8.cuh"
#include "ops/fp8_math.h"

namespace nanoddp::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;  // the transposing kernel's square tile; kTile x kTransposeRows threads a block
constexpr int kTransposeRows = 8;

// Each thread's largest |x| as bits (sign cleared): unsigned order is numeric order for finite
// values and infinity, and a NaN's bits are larger than all of them, so a NaN wins (fmaxf would
// drop it). One atomicMax per block.
template <typename T>
__global__ void amax_kernel(const T* x, int64_t n, unsigned* amax_bits) {
  unsigned top = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    top = max(top, __float_as_uint(to_f32(x[i])) & 0x7FFFFFFFu);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) top = max(top, __shfl_xor_sync(0xffffffffu, top, o));
  __shared__ unsigned warp_top[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_top[warp] = top;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; w++) top = max(top, warp_top[w]);
    atomicMax(amax_bits, top);
  }
}

// The scale every block derives from amax (one thread computes it; the division is in double, as
// nanochat's), and block 0 publishes its inverse for the GEMM.
__device__ float block_scale(const float* amax, bool e5m2, float* inv_scale) {
  __shared__ float scale;
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    scale = ops::fp8::scale_from_amax(*amax, e5m2);
    if (blockIdx.x == 0 && blockIdx.y == 0) *inv_scale = 1.f / scale;
  }
  __syncthreads();
  return scale;
}

template <typename T>
__global__ void quantize_kernel(const T* x, int64_t n, bool e5m2, const float* amax, uint8_t* codes, float* inv_scale) {
  const float scale = block_scale(amax, e5m2, inv_scale);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    codes[i] = ops::fp8::quantize(to_f32(x[i]), scale, e5m2);
}

// codes [cols, rows] = the transpose of x [rows, cols], quantized: a kTile x kTile tile of x is read
// along its rows into shared memory and written out along the transpose's rows, both coalesced.
// Grid: (ceil(rows / kTile), ceil(cols / kTile)) blocks of (kTile, kTransposeRows) threads.
template <typename T>
__global__ void quantize_transpose_kernel(const T* x, int64_t rows, int64_t cols, bool e5m2, const float* amax,
                                          uint8_t* codes, float* inv_scale) {
  __shared__ uint8_t tile[kTile][kTile + 4];  // + 4: rows of the tile fall on different banks
  const float scale = block_scale(amax, e5m2, inv_scale);
  const int64_t r0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  for (int dy = threadIdx.y; dy < kTile; dy += kTransposeRows) {
    const int64_t r = r0 + dy, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[dy][threadIdx.x] = ops::fp8::quantize(to_f32(x[r * cols + c]), scale, e5m2);
  }
  __syncthreads();
  for (int dy = threadIdx.y; dy < kTile; dy += kTransposeRows) {
    const int64_t c = c0 + dy, r = r0 + threadIdx.x;  // out row c, column r
    if (c < cols && r < rows) codes[c * rows + r] = tile[threadIdx.x][dy];
  }
}

}  // namespace

cudaError_t launch_fp8_amax(DType t, const void* x, int64_t n, float* amax, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(amax, 0, sizeof(float), stream);
  if (err != cudaSuccess || n == 0) return err;
  return with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    amax_kernel<T><<<grid_for(n, kThreads, 1024), kThreads, 0, stream>>>(static_cast<const T*>(x), n,
                                                                         reinterpret_cast<unsigned*>(amax));
    return cudaGetLastError();
  });
}

cudaError_t launch_fp8_quantize(DType t, const void* x, int64_t rows, int64_t cols, bool transpose, bool e5m2,
                                const float* amax, uint8_t* codes, float* inv_scale, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xt = static_cast<const T*>(x);
    if (transpose) {
      // Rows (tokens, unbounded) on x, columns (a layer's width, at most 65535 tiles) on y.
      if ((cols + kTile - 1) / kTile > 65535) return cudaErrorInvalidValue;
      const dim3 grid(static_cast<unsigned>((rows + kTile - 1) / kTile),
                      static_cast<unsigned>((cols + kTile - 1) / kTile));
      quantize_transpose_kernel<T>
          <<<grid, dim3(kTile, kTransposeRows), 0, stream>>>(xt, rows, cols, e5m2, amax, codes, inv_scale);
    } else {
      quantize_kernel<T>
          <<<grid_for(rows * cols, kThreads), kThreads, 0, stream>>>(xt, rows * cols, e5m2, amax, codes, inv_scale);
    }
    return cudaGetLastError();
  });
}

}  // namespace nanoddp::cuda
