// The fallback GEMM: 32x32 output tiles, 32-deep slices of op(a) and op(b) staged in shared
// memory, f32 accumulation in a fixed order. Correct for any shape and stride; not fast (cuBLASLt
// serves every GEMM of the model).
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemm_fallback.cuh"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

namespace nanoddp::cuda {

namespace {

constexpr int kT = 32;

template <typename TA, typename TC>
__global__ void gemm_kernel(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const TA* a, int64_t lda,
                            const TA* b, int64_t ldb, float beta, TC* c, int64_t ldc, int64_t first_row_tile) {
  __shared__ float sa[kT][kT + 1], sb[kT][kT + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;  // 32 x 8 threads; each computes 4 rows of a column
  const int64_t i0 = (first_row_tile + int64_t(blockIdx.y)) * kT, j0 = int64_t(blockIdx.x) * kT;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int64_t k0 = 0; k0 < k; k0 += kT) {
    for (int r = ty; r < kT; r += blockDim.y) {
      // sa[r][x] = op(a)[i0 + r][k0 + x]; sb[r][x] = op(b)[k0 + r][j0 + x]
      const int64_t i = i0 + r, kk = k0 + tx;
      sa[r][tx] = i < m && kk < k ? to_f32(ta ? a[kk * lda + i] : a[i * lda + kk]) : 0.f;
      const int64_t kr = k0 + r, j = j0 + tx;
      sb[r][tx] = kr < k && j < n ? to_f32(tb ? b[j * ldb + kr] : b[kr * ldb + j]) : 0.f;
    }
    __syncthreads();
    for (int x = 0; x < kT; x++) {
#pragma unroll
      for (int u = 0; u < 4; u++) acc[u] += sa[ty + 8 * u][x] * sb[x][tx];
    }
    __syncthreads();
  }
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const int64_t i = i0 + ty + 8 * u, j = j0 + tx;
    if (i < m && j < n) {
      const float old = beta != 0.f ? to_f32(c[i * ldc + j]) : 0.f;
      c[i * ldc + j] = from_f32<TC>(alpha * acc[u] + beta * old);
    }
  }
}

}  // namespace

cudaError_t launch_gemm_fallback(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                 DType ab_t, const void* a, int64_t lda, const void* b, int64_t ldb, float beta,
                                 DType c_t, void* c, int64_t ldc, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  // grid.y is at most 65535: taller outputs (over 2M rows) go in several launches of row tiles.
  constexpr int64_t kMaxGridY = 65535;
  const int64_t row_tiles = (m + kT - 1) / kT, col_tiles = (n + kT - 1) / kT;
  if (col_tiles > int64_t(INT32_MAX)) return cudaErrorInvalidValue;  // grid.x: over 68 billion columns
  const dim3 block(kT, 8);
  for (int64_t first = 0; first < row_tiles; first += kMaxGridY) {
    const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(std::min(kMaxGridY, row_tiles - first)));
    auto go = [&](auto* ta_tag, auto* tc_tag) {
      using TA = std::remove_pointer_t<decltype(ta_tag)>;
      using TC = std::remove_pointer_t<decltype(tc_tag)>;
      gemm_kernel<TA, TC><<<grid, block, 0, stream>>>(trans_a, trans_b, m, n, k, alpha, static_cast<const TA*>(a),
                                                      lda, static_cast<const TA*>(b), ldb, beta, static_cast<TC*>(c),
                                                      ldc, first);
    };
    with_dtype(ab_t, [&](auto* ta_tag) { with_dtype(c_t, [&](auto* tc_tag) { go(ta_tag, tc_tag); }); });
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace nanoddp::cuda
