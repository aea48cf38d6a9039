// The CPU backend's kernels (see ops/ops.h for the semantics of each op) and the helpers they share.
//
// Note [bf16 activations on the CPU]: activations ("act" tensors) are f32, bf16 or f16 (the same
// scheme; fp16 adds dynamic loss scaling in the trainer). A kernel is
// written once over its storage type T: it loads T into f32, computes in f32 and rounds once when
// it stores a T -- the rounding points of the CUDA kernels, so that a bf16 model on the CPU is the
// reference for the same model on a GPU. Statistics (rstd, lse), losses, gradients of parameters
// and optimizer state stay f32 whatever the activations are.
#pragma once

#include <omp.h>

#include <cmath>
#include <exception>
#include <mutex>
#include <type_traits>
#include <vector>

#include "ops/backend.h"

namespace nanoddp::ops::cpu {

// The CPU backend. Each op is defined in the file named after its family (matmul.cpp,
// attention.cpp, ...); backend_cpu.cpp holds the instance.
class CpuBackend final : public Backend {
 public:
  NANODDP_OPS(NANODDP_OP_OVERRIDE)
  void synchronize() override {}  // every CPU kernel has finished when it returns
};

// Row-major sgemm on raw pointers (leading dimensions in elements), shared by the kernels above.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Row-major GEMM of bf16 operands with f32 accumulation on raw pointers; c is f32, or bf16 (c_bf16)
// rounded once (Note [bf16 matmul on the CPU] in matmul.cpp).
void bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bf16* a, int64_t lda,
               const bf16* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_bf16);

// c = alpha op(a) op(b) + beta c by the operands' type, for kernels written over it: sgemm for f32,
// the bf16 matmul for bf16 with an f32 result or a bf16 one (rounded once).
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bf16* a, int64_t lda,
                 const bf16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  bf16_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false);
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bf16* a, int64_t lda,
                 const bf16* b, int64_t ldb, float beta, bf16* c, int64_t ldc) {
  bf16_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, true);
}

// Whether an f32-result matmul of this shape at this many threads runs as slices of k side by side
// (Note [GEMMs split along k] in matmul.cpp).
bool split_along_k(int64_t m, int64_t n, int64_t k, int threads);

// How many GEMM problems oneDNN's reduced-precision matmul has met in this process (each one a
// JIT-compiled primitive, or the finding that there is none), for tests; 0 without oneDNN.
int64_t reduced_matmul_problems();

// Loads and stores of an activation element, in f32. GCC vectorises both for bf16 (shifts and an
// add on 32-bit lanes), so one loop body serves both storage types.
inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const bf16* p, int64_t i) { return bf16_to_f32(p[i]); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(bf16* p, int64_t i, float v) { p[i] = f32_to_bf16(v); }
inline float load(const f16* p, int64_t i) { return f16_to_f32(p[i]); }
inline void store(f16* p, int64_t i, float v) { p[i] = f32_to_f16(v); }

// n f16 values to f32 and back on the CPU's conversion instructions where the build targets them
// (convert.cpp): the same values as f16_to_f32 / f32_to_f16 (a NaN's payload aside), 2.5x faster on
// data in cache. For the kernels whose f16 instantiation the per-element conversions dominate.
void widen_f16(float* dst, const f16* src, int64_t n);
void narrow_f16(f16* dst, const float* src, int64_t n);
void round_f16(float* p, int64_t n);  // p[i] = round_to_f16(p[i])

// x rounded to T and widened back, as a PyTorch op on T tensors leaves a scalar result (identity
// for float).
template <typename T>
inline float round_to(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    T r;
    store(&r, 0, x);
    return load(&r, 0);
  }
}

// Calls fn with a null pointer of the tensor's activation element type (float*, bf16* or f16*): the
// kernels are templates over it, `[&](auto tag) { using T = std::remove_pointer_t<decltype(tag)>; }`.
template <typename Fn>
decltype(auto) with_act_type(DType t, Fn&& fn) {
  if (t == DType::BF16) return fn(static_cast<bf16*>(nullptr));
  if (t == DType::F16) return fn(static_cast<f16*>(nullptr));
  NANODDP_ASSERT(t == DType::F32, "activations are f32, bf16 or f16, not {}", dtype_name(t));
  return fn(static_cast<float*>(nullptr));
}

// A per-thread scratch buffer of at least n elements: it grows to the largest size asked for and
// is then reused. Grow-only on purpose: std::vector::resize value-initialises the elements it adds,
// so a reused buffer resized down and back up was zero-filled on every call (about 10 ms of a
// 400 ms fp16 step in the widened GEMMs' operand buffers, bench_train_cpu on Zen 5).
template <typename T>
T* grown(std::vector<T>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Elementwise loops below this many elements run on one thread (a parallel region costs ~1 us).
inline constexpr int64_t kParallelGrain = 1 << 14;

// One row of n values converted between f32 and a storage type: exactly when widening, rounded once
// when narrowing; f16 on the conversion instructions.
inline void convert_row(float* dst, const f16* src, int64_t n) { widen_f16(dst, src, n); }
inline void convert_row(f16* dst, const float* src, int64_t n) { narrow_f16(dst, src, n); }
template <typename T>
void convert_row(float* dst, const T* src, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) dst[j] = load(src, j);
}
template <typename T>
void convert_row(T* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) store(dst, j, src[j]);
}

// rows x cols values from src (row stride ld_src) into dst (row stride ld_dst), converted as
// convert_row does: a view of a wider tensor (a head of [B, T, H, D]) to or from a dense buffer.
// Rows are spread over threads above kParallelGrain values, outside a parallel region only: inside
// one (attention's heads) even a region of one thread costs a team set-up per call.
template <typename D, typename S>
void convert_rows(D* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols) {
  if (rows * cols > kParallelGrain && !omp_in_parallel()) {
#pragma omp parallel for
    for (int64_t r = 0; r < rows; r++) convert_row(dst + r * ld_dst, src + r * ld_src, cols);
  } else {
    for (int64_t r = 0; r < rows; r++) convert_row(dst + r * ld_dst, src + r * ld_src, cols);
  }
}

// Note [row reductions in fixed lanes]: a sum (or max) along a row is kept as Lanes partial
// results over interleaved elements, combined pairwise at the end. `#pragma omp simd reduction`
// made GCC 12 keep its partial sums in a stack array and add them one after another once the loop
// was done: 32 dependent double adds per bf16 row, which cost more than the row's own loop at
// RMSNorm's 256 columns (bf16 RMSNorm forward took twice f32's time, bench_kernels on Zen 5). Here
// the lanes stay in registers, the combining takes log2(Lanes) vector adds, and the order of the
// additions is fixed by the code rather than by the compiler's vector width.
//
// term(j) gives element j's contribution (it may also store, e.g. an exponential it computed).
// part[0, W) += part[W, 2W), then the same on the first half, down to part[0]: constant trip
// counts, so each step is a few whole-register adds.
template <int W, typename Acc, typename Op>
[[gnu::always_inline]] inline void fold_lanes(Acc* part, Op op) {
  if constexpr (W > 0) {
#pragma omp simd
    for (int l = 0; l < W; l++) part[l] = op(part[l], part[l + W]);
    fold_lanes<W / 2>(part, op);
  }
}

template <typename Acc, int Lanes, typename Term>
[[gnu::always_inline]] inline Acc lane_sum(int64_t n, Term&& term) {
  static_assert((Lanes & (Lanes - 1)) == 0, "Lanes is a power of two");
  Acc part[Lanes] = {};
  int64_t i = 0;
  for (; i + Lanes <= n; i += Lanes)
#pragma omp simd
    for (int l = 0; l < Lanes; l++) part[l] += term(i + l);
  for (int l = 0; i + l < n; l++) part[l] += term(i + l);
  fold_lanes<Lanes / 2>(part, [](Acc a, Acc b) { return a + b; });
  return part[0];
}

// The largest term(j) over [0, n), -inf for n = 0; the same scheme as lane_sum. A ternary, not
// std::max (Note [vectorised max] in elementwise.cpp).
template <int Lanes, typename Term>
[[gnu::always_inline]] inline float lane_max(int64_t n, Term&& term) {
  static_assert((Lanes & (Lanes - 1)) == 0, "Lanes is a power of two");
  float part[Lanes];
  for (float& p : part) p = -INFINITY;
  int64_t i = 0;
  for (; i + Lanes <= n; i += Lanes)
#pragma omp simd
    for (int l = 0; l < Lanes; l++) {
      const float v = term(i + l);
      part[l] = part[l] > v ? part[l] : v;
    }
  for (int l = 0; i + l < n; l++) {
    const float v = term(i + l);
    part[l] = part[l] > v ? part[l] : v;
  }
  fold_lanes<Lanes / 2>(part, [](float a, float b) { return a > b ? a : b; });
  return part[0];
}

// fn(i) for i in [0, count) on the OpenMP threads, one item at a time each (dynamic schedule): for
// tasks that each run single-threaded kernels side by side (an OpenMP region inside this one runs
// on its own thread). An exception must not leave an OpenMP region: the first is kept and
// rethrown after it.
template <typename Fn>
void parallel_each(int64_t count, Fn&& fn) {
  std::exception_ptr failure;
  std::mutex failure_mu;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < count; i++) {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard lock(failure_mu);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace nanoddp::ops::cpu
