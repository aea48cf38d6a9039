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
#include <dnnl.hpp>
#endif

#include <omp.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/engines.h"

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

// Note [bf16 matmul on the CPU]: bf16 (or f16) operands, f32 accumulation, an f32 or reduced
// result rounded once at the end -- the contract of the CUDA path's cuBLASLt GEMMs
// (ops/cuda/matmul.h), so that a bf16 model on the CPU rounds where it rounds on a GPU. oneDNN's
// matmul primitive runs bf16 where the CPU multiplies bf16 in hardware: AMX tiles (Sapphire
// Rapids) or AVX512-BF16 dot products (Zen 4/5). Elsewhere its bf16 is an emulation or nothing,
// and the operands are widened to f32 for sgemm instead (widened_gemm below): the same rounding
// points at f32 speed. Measured on Zen 5 with oneDNN limited by DNNL_MAX_CPU_ISA (one thread,
// bench_train_cpu): at AVX512_CORE its emulated bf16 model ran at 0.41x f32 where widening runs at
// about 0.83x; at AVX2 it could not create a bf16 matmul at all. f16 it runs only where it has an
// optimised kernel (AVX512-FP16); elsewhere oneDNN 2.6 has none (primitive creation fails, or only
// its reference kernel exists, far slower than sgemm), and f16 is widened too. Creating a primitive
// JIT-compiles a kernel (~0.1-1 ms), so each is made once per problem -- input type, shapes,
// transposes, leading dimensions, output type, alpha, beta and thread count -- and kept, as is the
// finding that there is none; a model has a few dozen. Transposes are strides of the memory
// descriptors; alpha is an output scale and beta a sum post-op, as in BLAS. Without oneDNN the
// operands are always widened.
namespace {

#if NANODDP_HAVE_ONEDNN
class ReducedMatmuls {
 public:
  static ReducedMatmuls& get() {
    static ReducedMatmuls instance;
    return instance;
  }

  int64_t problems() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(cache_.size());
  }

  // False when oneDNN has no optimised kernel for the problem: the caller widens to f32.
  bool run(DType in, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
           int64_t lda, const void* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_reduced) {
    using dnnl::memory;
    // The thread count is part of the problem: oneDNN fixes a primitive's parallel split when it is
    // created, so one made at 1 thread would keep running on 1 after set_cpu_threads(2). Inside a
    // parallel region (Newton-Schulz's matrices, attention's heads) a call runs on its own thread,
    // so it counts as one.
    const int threads = omp_in_parallel() ? 1 : cpu_threads();
    const Key key{in, m, n, k, trans_a, trans_b, lda, ldb, ldc, c_reduced, alpha, beta, threads};
    const Entry* e = nullptr;
    {
      // The lock covers the cache only: std::map's entries stay where they are as others are
      // added, and a primitive may run on several threads at once (each on its own stream), as
      // Newton-Schulz's matrices do (optimizer.cpp).
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = cache_.find(key);
      if (it == cache_.end()) it = cache_.emplace(key, create(key)).first;
      if (!it->second) return false;
      e = &*it->second;
    }
    // oneDNN's own scratchpad is one per process (unless it was built for concurrent execution), so
    // each thread passes its own, 64-byte aligned; it only grows.
    thread_local dnnl::stream stream(engine_);
    thread_local std::vector<uint8_t> pad;
    const auto pad_at = reinterpret_cast<uintptr_t>(grown(pad, e->pad.get_size() + 64));
    // Each thread keeps one set of memory objects per problem and points them at this call's
    // buffers: creating four per call, and the argument map execute() takes, were most of a small
    // GEMM's cost in malloc and free (perf, 8 x 8 x 8: over a third of 1.45 us per call), and
    // attention and Newton-Schulz make about 1,300 calls per bf16 step.
    thread_local std::map<const Entry*, std::array<memory, 4>> bound;
    auto [it, added] = bound.try_emplace(e);
    auto& mem = it->second;
    if (added)
      mem = {memory(e->a, engine_, DNNL_MEMORY_NONE), memory(e->b, engine_, DNNL_MEMORY_NONE),
             memory(e->c, engine_, DNNL_MEMORY_NONE), memory(e->pad, engine_, DNNL_MEMORY_NONE)};
    mem[0].set_data_handle(const_cast<void*>(a));
    mem[1].set_data_handle(const_cast<void*>(b));
    mem[2].set_data_handle(c);
    mem[3].set_data_handle(reinterpret_cast<void*>((pad_at + 63) & ~uintptr_t{63}));
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mem[0].get()}, {DNNL_ARG_WEIGHTS, mem[1].get()},
                                    {DNNL_ARG_DST, mem[2].get()}, {DNNL_ARG_SCRATCHPAD, mem[3].get()}};
    const dnnl_status_t st = dnnl_primitive_execute(e->prim.get(), stream.get(), 4, args);
    NANODDP_ASSERT(st == dnnl_success, "oneDNN matmul failed with status {} (m={} n={} k={})", static_cast<int>(st),
                   m, n, k);
    stream.wait();
    return true;
  }

 private:
  using Key = std::tuple<DType, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, bool, float, float,
                         int>;
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c, pad;  // pad: the scratchpad the caller provides
  };

  std::optional<Entry> create(const Key& key) {
    using dnnl::memory;
    const auto [in, m, n, k, trans_a, trans_b, lda, ldb, ldc, c_reduced, alpha, beta, threads] = key;
    // bf16 only with bf16 instructions, f16 only on an optimised (not the reference) kernel.
    if (in == DType::BF16 && !onednn_has_bf16_instructions()) return std::nullopt;
    const memory::data_type t = in == DType::F16 ? memory::data_type::f16 : memory::data_type::bf16;
    // Row-major [rows, cols] with leading dimension ld, read transposed or not.
    auto operand = [](int64_t rows, int64_t cols, int64_t ld, bool trans, memory::data_type dt) {
      return trans ? memory::desc({rows, cols}, dt, {1, ld}) : memory::desc({rows, cols}, dt, {ld, 1});
    };
    const auto a_md = operand(m, k, lda, trans_a, t), b_md = operand(k, n, ldb, trans_b, t);
    const auto c_md = memory::desc({m, n}, c_reduced ? t : memory::data_type::f32, {ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine_);
      if (std::string_view(pd.impl_info_str()).starts_with("ref")) return std::nullopt;
      return Entry{dnnl::matmul(pd), a_md, b_md, c_md, pd.scratchpad_desc()};
    } catch (const dnnl::error&) {
      return std::nullopt;  // no kernel for this problem: widened
    }
  }

  ReducedMatmuls() : engine_(dnnl::engine::kind::cpu, 0) {}
  dnnl::engine engine_;
  std::mutex mutex_;
  std::map<Key, std::optional<Entry>> cache_;
};
#endif

// Reduced-precision operands widened to f32 (exactly) for sgemm, and the result rounded once: the
// same rounding points as a native bf16/f16 GEMM, at f32 speed. Used without oneDNN, and for f16
// where oneDNN has no optimised kernel (measured on Zen 5, which lacks AVX512-FP16: oneDNN 2.6
// cannot create an f16 matmul at all). Operands may be views with a leading dimension wider than
// their rows (attention's heads inside [B, T, H, D]): only their own elements are read, widened into
// dense buffers, and only the result's own elements are written. The buffers belong to the calling
// thread and only grow (no mmap per call).

template <typename T>
void widened_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const T* a, int64_t lda,
                  const T* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_reduced) {
  thread_local std::vector<float> af, bf, cf;
  // op(a) is [m, k]: stored [k, m] when transposed; op(b) is [k, n].
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  float* wa = grown(af, static_cast<size_t>(a_rows * a_cols));
  float* wb = grown(bf, static_cast<size_t>(b_rows * b_cols));
  convert_rows(wa, a_cols, a, lda, a_rows, a_cols);
  convert_rows(wb, b_cols, b, ldb, b_rows, b_cols);
  if (!c_reduced) {
    sgemm(trans_a, trans_b, m, n, k, alpha, wa, a_cols, wb, b_cols, beta, static_cast<float*>(c), ldc);
    return;
  }
  T* dst = static_cast<T*>(c);
  float* out = grown(cf, static_cast<size_t>(m * n));
  if (beta != 0.f) convert_rows(out, n, static_cast<const T*>(dst), ldc, m, n);
  sgemm(trans_a, trans_b, m, n, k, alpha, wa, a_cols, wb, b_cols, beta, out, n);
  convert_rows(dst, ldc, static_cast<const float*>(out), n, m, n);
}

// out = alpha op(a) op(b) + beta out for bf16 or f16 a, b (T) and an f32 or T result: on oneDNN
// where it has a kernel, else widened (Note [bf16 matmul on the CPU]).
template <typename T>
void reduced_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const T* a, int64_t lda,
                  const T* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_reduced) {
  if (m == 0 || n == 0) return;
#if NANODDP_HAVE_ONEDNN
  if (ReducedMatmuls::get().run(dtype_of<T>(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                                c_reduced))
    return;
#endif
  widened_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, c_reduced);
}

}  // namespace

int64_t reduced_matmul_problems() {
#if NANODDP_HAVE_ONEDNN
  return ReducedMatmuls::get().problems();
#else
  return 0;
#endif
}

void bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bf16* a, int64_t lda,
               const bf16* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_bf16) {
  reduced_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, c_bf16);
}

// Note [GEMMs split along k]: a GEMM with a small result and a long reduction -- the weight
// gradients dW = dY^T X, 256 x 256 x 2048 at the benchmark model's depth 4 -- splits poorly over
// threads by its output blocks (oneDNN reached 464 GFLOP/s on it at two threads in bf16, 600+ on the
// model's other shapes; f32 likewise). Such a GEMM is cut along k into one slice per thread, each
// slice runs side by side on single-threaded GEMMs (an OpenMP region inside this one runs on its
// own thread), and the slices' f32 sums are added in a fixed order: slice 0 (carrying beta) + 1 +
// ... The bits depend on the thread count, as oneDNN's own split does, not on the run. Only f32
// results (a rounded result would round each slice); not inside a parallel region.
bool split_along_k(int64_t m, int64_t n, int64_t k, int threads) {
  constexpr int64_t kSplitMaxOutput = 1 << 18;  // results of at most this many elements
  constexpr int64_t kSplitMinSlice = 256;       // and k of at least this much per thread
  return threads > 1 && !omp_in_parallel() && m * n <= kSplitMaxOutput && k >= 2 * std::max(m, n) &&
         k >= kSplitMinSlice * threads;
}

namespace {

// c[m, n] (f32, row stride ldc) = alpha op(a) op(b) + beta c, by slices of k, one per thread:
// gemm(k0, k1, beta, c, ldc) computes one slice's product into c.
template <typename Gemm>
void gemm_split_along_k(int64_t m, int64_t n, int64_t k, float beta, float* c, int64_t ldc, int threads,
                        const Gemm& gemm) {
  thread_local std::vector<float> partial_buf;  // slices 1.. of the calling thread's GEMMs; only grows
  float* partials = grown(partial_buf, static_cast<size_t>((threads - 1) * m * n));
  parallel_each(threads, [&](int64_t i) {
    const int64_t k0 = k * i / threads, k1 = k * (i + 1) / threads;
    if (i == 0)
      gemm(k0, k1, beta, c, ldc);
    else
      gemm(k0, k1, 0.f, partials + (i - 1) * m * n, n);
  });
#pragma omp parallel for if (m * n > kParallelGrain)
  for (int64_t r = 0; r < m; r++)
    for (int i = 1; i < threads; i++) {
      const float* p = partials + (i - 1) * m * n + r * n;
      float* cr = c + r * ldc;
#pragma omp simd
      for (int64_t j = 0; j < n; j++) cr[j] += p[j];
    }
}

}  // namespace

void CpuBackend::matmul(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,
                        float beta) {
  const int64_t m = out.dim(0), n = out.dim(1), k = trans_a ? a.dim(0) : a.dim(1), lda = a.dim(1), ldb = b.dim(1);
  const DType in = a.dtype();
  const bool reduced_out = out.dtype() != DType::F32;
  if (in == DType::BF16 || in == DType::F16)  // Note [bf16 matmul on the CPU]
    NANODDP_ASSERT(out.dtype() == DType::F32 || out.dtype() == in, "{0} matmul writes f32 or {0}", dtype_name(in));
  else
    NANODDP_ASSERT(out.dtype() == DType::F32 && in == DType::F32, "f32 operands need an f32 output on the CPU");
  // op(a) op(b) over k in [k0, k1) -- a column range of op(a), a row range of op(b) -- into c.
  auto gemm = [&](int64_t k0, int64_t k1, float beta_, void* c, int64_t ldc) {
    const int64_t a_off = trans_a ? k0 * lda : k0, b_off = trans_b ? k0 : k0 * ldb;
    if (in == DType::BF16)
      reduced_gemm(trans_a, trans_b, m, n, k1 - k0, alpha, a.data<bf16>() + a_off, lda, b.data<bf16>() + b_off, ldb,
                   beta_, c, ldc, reduced_out);
    else if (in == DType::F16)
      reduced_gemm(trans_a, trans_b, m, n, k1 - k0, alpha, a.data<f16>() + a_off, lda, b.data<f16>() + b_off, ldb,
                   beta_, c, ldc, reduced_out);
    else
      sgemm(trans_a, trans_b, m, n, k1 - k0, alpha, a.data<float>() + a_off, lda, b.data<float>() + b_off, ldb,
            beta_, static_cast<float*>(c), ldc);
  };
  const int threads = cpu_threads();
  if (!reduced_out && split_along_k(m, n, k, threads))  // Note [GEMMs split along k]
    gemm_split_along_k(m, n, k, beta, out.data<float>(), n, threads, gemm);
  else
    gemm(0, k, beta, out.raw(), n);
}

}  // namespace nanoddp::ops::cpu
