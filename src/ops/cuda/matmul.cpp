// cuBLASLt GEMM. Note [row-major GEMM on a column-major library]: a row-major matrix [r, c] with
// row stride ld is, read column-major, its transpose [c, r] with leading dimension ld. So
//   C[m, n] = op(A)[m, k] op(B)[k, n]   (row-major)
// is computed as the column-major product
//   C^T[n, m] = op(B)^T[n, k] op(A)^T[k, m],
// i.e. cuBLASLt's first operand is B (transposed iff trans_b), its second is A (transposed iff
// trans_a), with problem size (n, m, k) and every leading dimension the row stride we were given.
// No data moves.
#include "ops/cuda/matmul.h"

#include <cuda_runtime.h>

#include "core/cuda_util.h"
#include "ops/cuda/gemm_fallback.cuh"

#define NANODDP_CUBLAS_CHECK(expr)                                                                        \
  do {                                                                                                    \
    cublasStatus_t st_ = (expr);                                                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                                      \
      NANODDP_FAIL("cuBLASLt error {} ({}) in {} at {}:{}", static_cast<int>(st_), cublasLtGetStatusString(st_), \
                   #expr, __FILE__, __LINE__);                                                            \
    }                                                                                                     \
  } while (0)

namespace nanoddp::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // NVIDIA's recommendation for Hopper

cudaDataType_t cuda_type(DType t) {
  if (t == DType::BF16) return CUDA_R_16BF;
  return t == DType::F16 ? CUDA_R_16F : CUDA_R_32F;
}

// The largest power of two (up to 256) dividing the address and, in a batch, the stride between
// matrices in bytes (every matrix's address then has it): what the heuristic may assume.
int alignment_of(const void* p, int64_t stride_bytes = 0) {
  const auto a = reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(stride_bytes);
  int align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}

// Column-major layout of a row-major matrix [rows, cols] with row stride ld: [cols, rows], ld; in a
// batch of `count`, the matrices `stride` elements apart.
cublasLtMatrixLayout_t layout(DType t, int64_t rows, int64_t cols, int64_t ld, int64_t count, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  NANODDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, cuda_type(t), static_cast<uint64_t>(cols),
                                                  static_cast<uint64_t>(rows), ld));
  if (count > 1) {
    const auto n = static_cast<int32_t>(count);
    NANODDP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
    NANODDP_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return l;
}

}  // namespace

CublasLtGemm::CublasLtGemm(int device) : device_(device) {
  nanoddp::cuda::set_device(device);
  NANODDP_CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_ = Tensor::empty({static_cast<int64_t>(kWorkspaceBytes)}, DType::U8, Device::cuda(device));
}

CublasLtGemm::~CublasLtGemm() {
  const auto destroy = [](Plan& p) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  };
  for (auto& [key, p] : plans_) destroy(p);
  for (auto& [key, p] : fp8_plans_) destroy(p);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

// The heuristic's best algorithm for p's descriptors, given the byte alignments of cuBLASLt's A and
// B (our b and a) and of C = D; p.has_algo stays false where none fits.
void CublasLtGemm::pick_algorithm(Plan& p, int align_first, int align_second, int align_c) {
  cublasLtMatmulPreference_t pref = nullptr;
  NANODDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  const uint32_t al_first = static_cast<uint32_t>(align_first), al_second = static_cast<uint32_t>(align_second),
                 al_c = static_cast<uint32_t>(align_c);
  NANODDP_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  NANODDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                            &al_first, sizeof al_first));
  NANODDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                            &al_second, sizeof al_second));
  NANODDP_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
  NANODDP_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED means no algorithm fits (e.g. an odd stride); anything else is an error.
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) NANODDP_CUBLAS_CHECK(st);
  p.has_algo = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (p.has_algo) p.algo = result.algo;
}

CublasLtGemm::Plan& CublasLtGemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [m, n, k, ta, tb, ab_t, c_t, lda, ldb, ldc, align_a, align_b, align_c, count, stride_a, stride_b,
              stride_c] = key;
  Plan p;
  NANODDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Note [row-major GEMM on a column-major library]: cuBLASLt's A is our b, its B is our a.
  const cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  NANODDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
  NANODDP_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
  // Stored shapes (row-major): b is [k, n] or [n, k] (trans_b); a is [m, k] or [k, m] (trans_a).
  p.a = layout(ab_t, tb ? n : k, tb ? k : n, ldb, count, stride_b);
  p.b = layout(ab_t, ta ? k : m, ta ? m : k, lda, count, stride_a);
  p.c = layout(c_t, m, n, ldc, count, stride_c);

  pick_algorithm(p, align_b, align_a, align_c);
  return plans_.emplace(key, p).first->second;
}

void CublasLtGemm::run(cudaStream_t stream, int64_t m, int64_t n, int64_t k, float alpha, const GemmOperand& a,
                       const GemmOperand& b, float beta, void* c, DType c_type, int64_t ldc, const GemmBatch& batch) {
  if (m == 0 || n == 0 || batch.count == 0) return;
  NANODDP_ASSERT(batch.count > 0 && batch.count <= INT32_MAX, "GEMM batch of {}", batch.count);
  NANODDP_ASSERT(a.type == b.type, "GEMM operands of different types");
  // cuBLASLt multiplies 16-bit operands into their own type or f32, and f32 into f32; other pairs
  // (f32 x f32 -> bf16, bf16 into f16) and k = 0 go to the fallback kernel.
  const bool lt_types = (c_type == a.type || c_type == DType::F32) && k > 0;
  Plan* plan_ref = nullptr;
  Plan p;  // a copy taken under the lock: descriptors are immutable once made
  if (lt_types) {
    const int64_t ea = static_cast<int64_t>(dtype_size(a.type)), ec = static_cast<int64_t>(dtype_size(c_type));
    const bool many = batch.count > 1;
    const int64_t sa = many ? batch.stride_a : 0, sb = many ? batch.stride_b : 0, sc = many ? batch.stride_c : 0;
    const Key key{m, n, k, a.trans, b.trans, a.type, c_type, a.ld, b.ld, ldc, alignment_of(a.ptr, sa * ea),
                  alignment_of(b.ptr, sb * ea), alignment_of(c, sc * ec), batch.count, sa, sb, sc};
    std::lock_guard lock(mu_);
    plan_ref = &plan(key);  // std::map: the reference stays valid as plans are added
    p = *plan_ref;
  }
  if (plan_ref != nullptr && p.has_algo) {
    const cublasStatus_t st = cublasLtMatmul(handle_, p.op, &alpha, b.ptr, p.a, a.ptr, p.b, &beta, c, p.c, c, p.c,
                                             &p.algo, workspace_.raw(), kWorkspaceBytes, stream);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) {
      NANODDP_CUBLAS_CHECK(st);
      return;
    }
    // The heuristic offered an algorithm the problem cannot run with: use the fallback from now on.
    std::lock_guard lock(mu_);
    plan_ref->has_algo = false;
  }
  // The fallback is one product per launch: a batch is walked matrix by matrix.
  const auto at = [](const void* p, int64_t i, int64_t stride, DType t) {
    return static_cast<const char*>(p) + i * stride * static_cast<int64_t>(dtype_size(t));
  };
  for (int64_t i = 0; i < batch.count; i++) {
    void* ci = const_cast<char*>(at(c, i, batch.stride_c, c_type));
    NANODDP_CUDA_CHECK(launch_gemm_fallback(a.trans, b.trans, m, n, k, alpha, a.type,
                                            at(a.ptr, i, batch.stride_a, a.type), a.ld,
                                            at(b.ptr, i, batch.stride_b, b.type), b.ld, beta, c_type, ci, ldc, stream));
  }
}

// Note [FP8 GEMM layout]: cuBLASLt runs FP8 on Hopper only as "TN": its A transposed, its B not, both
// K-major. Through Note [row-major GEMM on a column-major library] its A is our b and its B our a, so
// C^T[n, m] = B_lt^T A_lt with A_lt = b codes read column-major [k, n] (ld k) and transposed, B_lt = a
// codes [k, m] (ld k): c[m, n] = a[m, k] b[n, k]^T with both operands row-major and K innermost. The
// scale pointers are likewise swapped: cuBLASLt's A scale is b's.
CublasLtGemm::Plan& CublasLtGemm::fp8_plan(const Fp8Key& key) {
  auto it = fp8_plans_.find(key);
  if (it != fp8_plans_.end()) return it->second;
  const auto [m, n, k, a_e5m2, b_e5m2, c_t, ldc, align_a, align_b, align_c, fast_accum] = key;
  Plan p;
  NANODDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  NANODDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t));
  NANODDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n));
  const int8_t fast = fast_accum ? 1 : 0;
  NANODDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
  const auto fp8_type = [](bool e5m2) { return e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; };
  NANODDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, fp8_type(b_e5m2), static_cast<uint64_t>(k),
                                                  static_cast<uint64_t>(n), k));
  NANODDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, fp8_type(a_e5m2), static_cast<uint64_t>(k),
                                                  static_cast<uint64_t>(m), k));
  NANODDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, cuda_type(c_t), static_cast<uint64_t>(n),
                                                  static_cast<uint64_t>(m), ldc));
  // cuBLASLt's A is our b (Note [FP8 GEMM layout]).
  pick_algorithm(p, align_b, align_a, align_c);
  return fp8_plans_.emplace(key, p).first->second;
}

bool CublasLtGemm::run_fp8(cudaStream_t stream, int64_t m, int64_t n, int64_t k, const Fp8Operand& a,
                           const Fp8Operand& b, float beta, void* c, DType c_type, int64_t ldc, bool fast_accum) {
  if (m == 0 || n == 0) return true;
  NANODDP_ASSERT(!(a.e5m2 && b.e5m2), "cuBLASLt multiplies at most one e5m2 operand");
  const Fp8Key key{m, n, k, a.e5m2, b.e5m2, c_type, ldc, alignment_of(a.codes), alignment_of(b.codes),
                   alignment_of(c), fast_accum};
  // The scale pointers change from call to call (scratch buffers): they are set on the shared
  // descriptor and the GEMM queued under one lock.
  std::lock_guard lock(mu_);
  Plan& p = fp8_plan(key);
  if (!p.has_algo) return false;
  const float* a_scale_lt = b.inv_scale;  // Note [FP8 GEMM layout]: cuBLASLt's A is our b
  const float* b_scale_lt = a.inv_scale;
  NANODDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale_lt,
                                                      sizeof a_scale_lt));
  NANODDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale_lt,
                                                      sizeof b_scale_lt));
  const float alpha = 1.f;
  NANODDP_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, b.codes, p.a, a.codes, p.b, &beta, c, p.c, c, p.c,
                                      &p.algo, workspace_.raw(), kWorkspaceBytes, stream));
  return true;
}

}  // namespace nanoddp::cuda
