// GEMM on the CPU through oneDNN's sgemm. On this machine (AMD Zen 5, AVX-512) oneDNN 2.6 reached
// 190-213 GFLOP/s on one thread for the model's shapes, against 97-105 for OpenBLAS 0.3.21
// (bench/gemm_bench.cpp prints both), so oneDNN is the BLAS we keep.
#include <dnnl.h>

#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
                                ldc);
  NANODDP_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status {} (m={} n={} k={})", static_cast<int>(st), m,
                 n, k);
}

void CpuBackend::matmul(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,
            float beta) {
  NANODDP_ASSERT(out.dtype() == DType::F32 && a.dtype() == DType::F32, "the CPU backend computes in f32");
  int64_t m = out.dim(0), n = out.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  sgemm(trans_a, trans_b, m, n, k, alpha, a.data<float>(), a.dim(1), b.data<float>(), b.dim(1), beta,
        out.data<float>(), n);
}

}  // namespace nanoddp::ops::cpu
