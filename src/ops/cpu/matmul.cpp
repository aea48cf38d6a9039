// GEMM on the CPU through oneDNN's sgemm. On this machine (AMD Zen 5, AVX-512) oneDNN 2.6 reached
// 190-213 GFLOP/s on one thread for the model's shapes, against 97-105 for OpenBLAS 0.3.21
// (bench/gemm_bench.cpp prints both), so oneDNN is the BLAS we keep.
//
// Builds without oneDNN (NANODDP_HAVE_ONEDNN 0: the GPU machines, which have none of Debian's -dev
// packages) use the portable kernel below instead. It exists so that the CPU backend, which the
// GPU tests compare against, works everywhere; it is correct and deterministic, not fast.
#include "nanoddp/build_config.h"

#if NANODDP_HAVE_ONEDNN
#include <dnnl.h>
#endif

#include <algorithm>
#include <vector>

#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

namespace {

#if !NANODDP_HAVE_ONEDNN
// c[m, n] = alpha op(a) op(b) + beta c, row-major, BLAS semantics (beta == 0: c is not read).
// op(b) is packed in [kKc, kNc] panels that stay in L2 while every row of c passes over them; four
// rows of c share each loaded panel row. Rows are split across threads, so each element of c is
// summed by one thread in a fixed order: the result does not depend on the thread count.
void portable_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  constexpr int64_t kKc = 256, kNc = 1024, kRows = 4;
  const bool parallel = m * n * std::max<int64_t>(k, 1) > kParallelGrain * 16;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < m; i++) {
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < n; j++) ci[j] = beta == 0.f ? 0.f : beta * ci[j];
  }
  // One panel per thread that calls this, allocated once (no mmap per call).
  thread_local std::vector<float> panel;
  panel.resize(kKc * kNc);
  float* bp = panel.data();
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kb = std::min(kKc, k - p0);
    for (int64_t j0 = 0; j0 < n; j0 += kNc) {
      const int64_t nb = std::min(kNc, n - j0);
      for (int64_t p = 0; p < kb; p++)
        for (int64_t j = 0; j < nb; j++)
          bp[p * nb + j] = trans_b ? b[(j0 + j) * ldb + p0 + p] : b[(p0 + p) * ldb + j0 + j];
      auto at = [&](int64_t i, int64_t p) { return alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]); };
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t i0 = 0; i0 < m; i0 += kRows) {
        const int64_t rows = std::min(kRows, m - i0);
        if (rows == kRows) {
          float* c0 = c + i0 * ldc + j0;
          float *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
          for (int64_t p = 0; p < kb; p++) {
            const float a0 = at(i0, p0 + p), a1 = at(i0 + 1, p0 + p), a2 = at(i0 + 2, p0 + p),
                        a3 = at(i0 + 3, p0 + p);
            const float* br = bp + p * nb;
#pragma omp simd
            for (int64_t j = 0; j < nb; j++) {
              c0[j] += a0 * br[j];
              c1[j] += a1 * br[j];
              c2[j] += a2 * br[j];
              c3[j] += a3 * br[j];
            }
          }
        } else {
          for (int64_t r = 0; r < rows; r++) {
            float* ci = c + (i0 + r) * ldc + j0;
            for (int64_t p = 0; p < kb; p++) {
              const float ai = at(i0 + r, p0 + p);
              const float* br = bp + p * nb;
#pragma omp simd
              for (int64_t j = 0; j < nb; j++) ci[j] += ai * br[j];
            }
          }
        }
      }
    }
  }
}
#endif

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#if NANODDP_HAVE_ONEDNN
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
                                ldc);
  NANODDP_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status {} (m={} n={} k={})", static_cast<int>(st), m,
                 n, k);
#else
  portable_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

void CpuBackend::matmul(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,
                        float beta) {
  NANODDP_ASSERT(out.dtype() == DType::F32 && a.dtype() == DType::F32, "the CPU backend computes in f32");
  int64_t m = out.dim(0), n = out.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  sgemm(trans_a, trans_b, m, n, k, alpha, a.data<float>(), a.dim(1), b.data<float>(), b.dim(1), beta,
        out.data<float>(), n);
}

}  // namespace nanoddp::ops::cpu
