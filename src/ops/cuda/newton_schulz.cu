// The elementwise stages of Newton-Schulz, with the rounding of the CPU kernel (ops/cpu/
// optimizer.cpp): in bf16 mode every stage's result is rounded to bf16 once, scalars are f32.
// The matrices are at most a few million elements, so these kernels are simple; the transposes
// go through 32x32 shared-memory tiles so that both sides stay coalesced. Each launch covers a
// batch of matrices, one grid slice (blockIdx.z, or .y) per matrix.
#include "ops/cuda/common.cuh"
#include "ops/cuda/newton_schulz.cuh"

#include <type_traits>

namespace nanoddp::cuda {

namespace {

constexpr int kTile = 32;
constexpr int kNormBlocks = 256;  // fixed, so that the sum order never changes
constexpr int kThreads = 256;

// dst [c, r] = src [r, c]^T through a tile (r, c: rows and columns of src), converting types;
// blockIdx.x, blockIdx.y pick the tile.
template <typename TD, typename TS>
__device__ void transpose_tile(TD* dst, const TS* src, int64_t r, int64_t c) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t rr = r0 + i, cc = c0 + threadIdx.x;
    if (rr < r && cc < c) tile[i][threadIdx.x] = to_f32(src[rr * c + cc]);
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t cc = c0 + i, rr = r0 + threadIdx.x;
    if (rr < r && cc < c) dst[cc * r + rr] = from_f32<TD>(tile[threadIdx.x][i]);
  }
}

// dst = src over n elements, converting types (blockIdx.x: grid-stride).
template <typename TD, typename TS>
__device__ void convert_range(TD* dst, const TS* src, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = from_f32<TD>(to_f32(src[i]));
}

// Matrix blockIdx.z of the batch: x.p[z] [r, c] into X [batch, ., .] (kLoad), or back (!kLoad),
// transposed or not. The transposing kernels run on (32, 8) blocks over a tile grid; the others
// on 1-D blocks.
template <typename T, bool kLoad>
__global__ void transpose_batch_kernel(T* X, NsMatrices x, int64_t r, int64_t c) {
  T* mine = X + int64_t(blockIdx.z) * r * c;
  if constexpr (kLoad)
    transpose_tile(mine, x.p[blockIdx.z], r, c);
  else
    transpose_tile(x.p[blockIdx.z], static_cast<const T*>(mine), r, c);
}

template <typename T, bool kLoad>
__global__ void convert_batch_kernel(T* X, NsMatrices x, int64_t n) {
  T* mine = X + int64_t(blockIdx.z) * n;
  if constexpr (kLoad)
    convert_range(mine, x.p[blockIdx.z], n);
  else
    convert_range(x.p[blockIdx.z], static_cast<const T*>(mine), n);
}

// r, c: the shape of the matrices on the side being read (x's when loading, X's when storing).
template <typename T, bool kLoad>
void move_batch(T* X, const NsMatrices& x, int batch, int64_t r, int64_t c, bool transpose, cudaStream_t stream) {
  if (transpose) {
    const dim3 grid(static_cast<unsigned>((c + kTile - 1) / kTile), static_cast<unsigned>((r + kTile - 1) / kTile),
                    static_cast<unsigned>(batch));
    transpose_batch_kernel<T, kLoad><<<grid, dim3(kTile, 8), 0, stream>>>(X, x, r, c);
  } else {
    const dim3 grid(grid_for(r * c, kThreads), 1, static_cast<unsigned>(batch));
    convert_batch_kernel<T, kLoad><<<grid, kThreads, 0, stream>>>(X, x, r * c);
  }
}

// Matrix blockIdx.y: partial[y][block] = sum of X[y]^2 over the block's grid-stride share, in f64.
template <typename T>
__global__ void sum_squares_kernel(double* partial, const T* X, int64_t n) {
  __shared__ double scratch[32];
  X += int64_t(blockIdx.y) * n;
  partial += int64_t(blockIdx.y) * kNormBlocks;
  double acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = to_f32(X[i]);
    acc += v * v;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Matrix blockIdx.x: denom[x] = round(round(round(sqrt(sum partial[x])) * factor) + eps), as the CPU
// kernels round it (with factor 1 the middle rounding changes nothing).
template <typename T>
__global__ void norm_kernel(float* denom, const double* partial, float factor, float eps) {
  __shared__ double scratch[32];
  partial += int64_t(blockIdx.x) * kNormBlocks;
  denom += blockIdx.x;
  double acc = 0;
  for (int i = threadIdx.x; i < kNormBlocks; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) {
    const float norm = round_to<T>(static_cast<float>(sqrt(acc)));
    *denom = round_to<T>(round_to<T>(norm * factor) + eps);
  }
}

// Matrix blockIdx.y: X[y] /= denom[y].
template <typename T>
__global__ void divide_kernel(T* X, int64_t n, const float* denom) {
  X += int64_t(blockIdx.y) * n;
  const float d = denom[blockIdx.y];
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    X[i] = from_f32<T>(to_f32(X[i]) / d);
}

template <typename T>
__global__ void scale_kernel(T* out, const T* in, int64_t n, float s) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_f32<T>(s * to_f32(in[i]));
}

template <typename T>
__global__ void combine_kernel(T* out, const T* a, const T* b, int64_t n, float s) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_f32<T>(round_to<T>(s * to_f32(a[i])) + to_f32(b[i]));
}

}  // namespace

cudaError_t launch_ns_load(DType t, void* X, const NsMatrices& x, int batch, int64_t rows, int64_t cols,
                           bool transpose, cudaStream_t stream) {
  if (rows * cols == 0 || batch == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    move_batch<T, true>(static_cast<T*>(X), x, batch, rows, cols, transpose, stream);
  });
  return cudaGetLastError();
}

cudaError_t launch_ns_store(DType t, const NsMatrices& x, const void* X, int batch, int64_t rows, int64_t cols,
                            bool transpose, cudaStream_t stream) {
  if (rows * cols == 0 || batch == 0) return cudaSuccess;
  // X[i] is [cols, rows] when transposed: transposing it back gives x [rows, cols].
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    move_batch<T, false>(static_cast<T*>(const_cast<void*>(X)), x, batch, transpose ? cols : rows,
                         transpose ? rows : cols, transpose, stream);
  });
  return cudaGetLastError();
}

namespace {
// The scratch holds the partial sums, then (at a 256-byte boundary) the divisors.
size_t divisors_offset(int batch) { return (size_t(batch) * kNormBlocks * sizeof(double) + 255) / 256 * 256; }
}  // namespace

size_t ns_normalise_scratch_bytes(int batch) { return divisors_offset(batch) + size_t(batch) * sizeof(float); }

cudaError_t launch_ns_normalise(DType t, void* X, int batch, int64_t n, void* scratch, cudaStream_t stream,
                                float factor, float eps) {
  if (n == 0 || batch == 0) return cudaSuccess;
  double* partial = static_cast<double*>(scratch);
  float* denom = reinterpret_cast<float*>(static_cast<char*>(scratch) + divisors_offset(batch));
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const auto b = static_cast<unsigned>(batch);
    sum_squares_kernel<T><<<dim3(kNormBlocks, b), kThreads, 0, stream>>>(partial, static_cast<const T*>(X), n);
    norm_kernel<T><<<b, kThreads, 0, stream>>>(denom, partial, factor, eps);
    divide_kernel<T><<<dim3(grid_for(n, kThreads), b), kThreads, 0, stream>>>(static_cast<T*>(X), n, denom);
  });
  return cudaGetLastError();
}

cudaError_t launch_ns_scale(DType t, void* out, const void* in, int64_t n, float s, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    scale_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out),
                                                                     static_cast<const T*>(in), n, s);
  });
  return cudaGetLastError();
}

cudaError_t launch_ns_combine(DType t, void* out, const void* a, const void* b, int64_t n, float s,
                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    combine_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n, s);
  });
  return cudaGetLastError();
}

}  // namespace nanoddp::cuda
