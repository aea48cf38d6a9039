// Causal softmax attention on the CPU, with grouped-query heads.
//
// Work is split by (batch, head) and, inside, by tiles of kTile queries: a tile of queries
// [i0, i1) needs keys [first(i0), last(i1-1)], so the scores of a tile are one GEMM of
// [i1-i0, D] x [D, keys] and the masked upper triangle costs at most half a tile. With a sliding
// window (Note [attention window] in ops.cpp) first(i) is the oldest key query i sees, so a tile
// reads window + kTile keys at most, and the masked lower triangle costs another half tile. Only the
// log-sum-exp of each score row is kept for backward, which recomputes the probabilities
// (flash-attention's trade: a little more compute, no [T, T] tensor per head in memory).
//
// bf16 or f16 storage (Note [bf16 activations on the CPU] in kernels.h): bf16 heads go straight into
// oneDNN's bf16 matmul (bf16_gemm: f32 accumulation, AVX512-BF16 or AMX where the CPU has them)
// with their row stride, and the probabilities P and the score gradient dS are written as bf16 for
// it; f16 heads are widened to f32 once per task for sgemm (oneDNN has no f16 kernel on most CPUs,
// Note [bf16 matmul on the CPU] in matmul.cpp). Either way results are rounded once, at the store.
// On sgemm over widened heads bf16 ran at f32's speed (8.6 + 20.1 ms of a bf16 Muon step against
// 8.1 + 19.6 for f32, bench_train_cpu --breakdown at 1 thread); on the bf16 matmul one call at the
// benchmark model's size takes 1.30 ms forward and 2.84 ms backward against f32's 2.02 and 4.59
// (OMP_NUM_THREADS=1 bench_kernels --benchmark_filter=attention, Zen 5 with AVX512-BF16).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vecmath.h"

namespace nanoddp::ops::cpu {

namespace {

constexpr int64_t kTile = 128;

// A row's max and softmax sum in 16 f32 lanes: one AVX-512 register each.
constexpr int kSoftmaxLanes = 16;

// The oldest key the query at position `pos` sees; window 0: key 0 (full causal attention).
inline int64_t first_key(int64_t pos, int64_t window) { return window > 0 ? std::max<int64_t>(0, pos - window) : 0; }

// Layout of one head inside a [B, T, H, D] tensor.
struct HeadView {
  int64_t h, d;
  int64_t stride() const { return h * d; }
  int64_t offset(int64_t b, int64_t t_len, int64_t head) const { return b * t_len * h * d + head * d; }
};

// The GEMMs' operand type G for storage T in training (gemm in kernels.h takes either): bf16 for
// bf16 (oneDNN's bf16 matmul), f32 for f32 and (widened) f16. A forward from a KV cache runs bf16 widened to f32 too (see
// CpuBackend::attention_forward).
template <typename T>
using Operand = std::conditional_t<std::is_same_v<T, bf16>, bf16, float>;

// One head's rows [rows, d] (row stride ld) as operands of type G: the rows themselves where G is
// the storage type, else widened into buf with row stride d. `ld_out` receives the stride of what
// is returned.
template <typename G, typename T>
const G* head_operand(const T* src, int64_t rows, int64_t ld, int64_t d, std::vector<float>& buf,
                      int64_t& ld_out) {
  if constexpr (std::is_same_v<G, T>) {
    ld_out = ld;
    return src;
  } else {
    static_assert(std::is_same_v<G, float>);
    float* dst = grown(buf, rows * d);
    convert_rows(dst, d, src, ld, rows, d);  // kernels.h
    ld_out = d;
    return dst;
  }
}

// Where a head's results of type G go: straight into storage of that type (f32; bf16, rounded by
// the GEMM), else into buf (f32) for convert_rows.
template <typename G, typename T>
G* out_operand(T* dst, int64_t ld, int64_t rows, int64_t d, std::vector<float>& buf, int64_t& ld_out) {
  if constexpr (std::is_same_v<G, T>) {
    ld_out = ld;
    return dst;
  } else {
    ld_out = d;
    return grown(buf, rows * d);
  }
}

// With bf16 (f16) activations the probabilities P and the score gradient dS are rounded to bf16
// (f16) before they enter a GEMM, where the CUDA flash kernels round them for the tensor cores.
// Their rows are computed in f32 and written as operands (put_operand): bf16 operands round as
// they are stored; f32 operands write in place (the operand buffer is the f32 one), holding bf16
// values when the storage is bf16 (an add and a mask, vectorised), and f16 values after
// round_gemm_operands, a row at a time on the conversion instructions, which take about a third
// of the time of the portable conversions (convert.cpp).
template <typename G>
G* operand_rows(float* f32_rows, std::vector<bf16>& buf, int64_t n) {
  if constexpr (std::is_same_v<G, bf16>) {
    return grown(buf, n);
  } else {
    return f32_rows;
  }
}
template <typename G, typename T>
inline void put_operand(G* p, int64_t j, float v) {
  if constexpr (std::is_same_v<G, bf16>)
    store(p, j, v);
  else if constexpr (std::is_same_v<T, bf16>)
    p[j] = round_to<bf16>(v);
  else
    p[j] = v;
}
template <typename T>
void round_gemm_operands(float* p, int64_t n) {
  if constexpr (std::is_same_v<T, f16>) round_f16(p, n);
}
template <typename T>
void round_gemm_operands(bf16*, int64_t) {}

template <typename T, typename G>
void attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            int64_t kv_len, float scale, int64_t window) {
  const int64_t batch = q.dim(0), tq = q.dim(1), hq = q.dim(2), d = q.dim(3);
  const int64_t tcap = k.dim(1), hkv = k.dim(2), group = hq / hkv, q_pos0 = kv_len - tq;
  const HeadView qv{hq, d}, kvv{hkv, d};
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
  T* po = out.data<T>();
  float* pl = lse.data<float>();

#pragma omp parallel
  {
    thread_local std::vector<float> s_buf, q_buf, k_buf, v_buf, o_buf;
    thread_local std::vector<bf16> p_buf;
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < batch; b++) {
      for (int64_t h = 0; h < hq; h++) {
        int64_t ldq, ldk, ldv, ldo;
        const G* qh = head_operand<G>(pq + qv.offset(b, tq, h), tq, qv.stride(), d, q_buf, ldq);
        const G* kh = head_operand<G>(pk + kvv.offset(b, tcap, h / group), kv_len, kvv.stride(), d, k_buf, ldk);
        const G* vh = head_operand<G>(pv + kvv.offset(b, tcap, h / group), kv_len, kvv.stride(), d, v_buf, ldv);
        T* oh_out = po + qv.offset(b, tq, h);
        G* oh = out_operand<G>(oh_out, qv.stride(), tq, d, o_buf, ldo);
        float* lh = pl + (b * hq + h) * tq;
        for (int64_t i0 = 0; i0 < tq; i0 += kTile) {
          // The tile's queries sit at positions p0 ..= p0 + rows - 1 and see keys k0 ..= that.
          const int64_t rows = std::min(kTile, tq - i0), p0 = q_pos0 + i0, k0 = first_key(p0, window);
          const int64_t keys = p0 + rows - k0;
          float* s = grown(s_buf, rows * keys);
          G* p = operand_rows<G>(s, p_buf, rows * keys);
          // s[rows, keys] = scale * Q_tile K[k0 .., :]^T
          gemm(false, true, rows, keys, d, scale, qh + i0 * ldq, ldq, kh + k0 * ldk, ldk, 0.f, s, keys);
          for (int64_t r = 0; r < rows; r++) {
            float* sr = s + r * keys;
            G* pr = p + r * keys;
            // This row sees the tile's keys [lo, hi).
            const int64_t lo = first_key(p0 + r, window) - k0, hi = p0 + r + 1 - k0, n = hi - lo;
            // Fixed lanes (Note [row reductions in fixed lanes] in kernels.h).
            const float mx = lane_max<kSoftmaxLanes>(n, [&](int64_t j) { return sr[lo + j]; });
            const float sum = lane_sum<float, kSoftmaxLanes>(n, [&](int64_t j) {
              sr[lo + j] = fast_exp(sr[lo + j] - mx);
              return sr[lo + j];
            });
            const float inv = 1.f / sum;
#pragma omp simd
            for (int64_t j = lo; j < hi; j++) put_operand<G, T>(pr, j, sr[j] * inv);
            round_gemm_operands<T>(pr + lo, n);
            std::memset(static_cast<void*>(pr), 0, lo * sizeof(*pr));
            std::memset(static_cast<void*>(pr + hi), 0, (keys - hi) * sizeof(*pr));
            lh[i0 + r] = mx + std::log(sum);
          }
          // O_tile = P V[k0 .., :]
          gemm(false, false, rows, d, keys, 1.f, p, keys, vh + k0 * ldv, ldv, 0.f, oh + i0 * ldo, ldo);
        }
        if constexpr (!std::is_same_v<G, T>)
          convert_rows(oh_out, qv.stride(), static_cast<const float*>(oh), d, tq, d);
      }
    }
  }
}

// P and dS of a tile of queries i0 .. i0 + rows - 1 (training: query i sits at position i) as GEMM
// operands [rows, keys], for keys k0 .. k0 + keys - 1: p [rows, keys] holds the scaled scores and
// dp [rows, keys] dO V^T; P = exp(s - lse) and dS = P (dP - delta) where a query sees the key, 0
// elsewhere. p_op and ds_op may be p and dp themselves (f32 operands are written in place).
template <typename T, typename G>
void softmax_backward_rows(G* p_op, G* ds_op, const float* p, const float* dp, const float* lse, const float* delta,
                           int64_t i0, int64_t rows, int64_t k0, int64_t keys, int64_t window) {
  for (int64_t r = 0; r < rows; r++) {
    const float* pr = p + r * keys;
    const float* dpr = dp + r * keys;
    G* p_out = p_op + r * keys;
    G* ds_out = ds_op + r * keys;
    // This row sees the tile's keys [lo, hi).
    const int64_t lo = first_key(i0 + r, window) - k0, hi = i0 + r + 1 - k0;
    const float l = lse[i0 + r], dl = delta[r];
#pragma omp simd
    for (int64_t j = lo; j < hi; j++) {
      const float pj = fast_exp(pr[j] - l);
      put_operand<G, T>(ds_out, j, pj * (dpr[j] - dl));  // dS
      put_operand<G, T>(p_out, j, pj);
    }
    round_gemm_operands<T>(ds_out + lo, hi - lo);
    round_gemm_operands<T>(p_out + lo, hi - lo);
    for (G* x : {p_out, ds_out}) {
      std::memset(static_cast<void*>(x), 0, lo * sizeof(*x));
      std::memset(static_cast<void*>(x + hi), 0, (keys - hi) * sizeof(*x));
    }
  }
}

template <typename T>
void attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             float scale, int64_t window) {
  const int64_t batch = q.dim(0), t = q.dim(1), hq = q.dim(2), d = q.dim(3);
  const int64_t hkv = k.dim(2), group = hq / hkv;
  const HeadView qv{hq, d}, kvv{hkv, d};
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
  using G = Operand<T>;
  const T *pdo = dout.data<T>(), *po = out.data<T>();
  const float* pl = lse.data<float>();
  T *pdq = dq.data<T>(), *pdk = dk.data<T>(), *pdv = dv.data<T>();

  // One task per (batch, kv head): the query heads of a group all add into the same dk, dv rows,
  // which are summed in f32 and rounded once at the end.
#pragma omp parallel
  {
    thread_local std::vector<float> p_buf, dp_buf, delta_buf, k_buf, v_buf, dk_buf, dv_buf, q_buf, do_buf, o_buf,
        dq_buf;
    thread_local std::vector<bf16> p_ops, ds_ops;
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < batch; b++) {
      for (int64_t g = 0; g < hkv; g++) {
        int64_t ldk, ldv, lddk, lddv;
        const G* kh = head_operand<G>(pk + kvv.offset(b, t, g), t, kvv.stride(), d, k_buf, ldk);
        const G* vh = head_operand<G>(pv + kvv.offset(b, t, g), t, kvv.stride(), d, v_buf, ldv);
        T* dkh_out = pdk + kvv.offset(b, t, g);
        T* dvh_out = pdv + kvv.offset(b, t, g);
        float* dkh = out_operand<float>(dkh_out, kvv.stride(), t, d, dk_buf, lddk);  // f32 sums
        float* dvh = out_operand<float>(dvh_out, kvv.stride(), t, d, dv_buf, lddv);
        for (int64_t i = 0; i < t; i++) {
          std::memset(dkh + i * lddk, 0, d * sizeof(float));
          std::memset(dvh + i * lddv, 0, d * sizeof(float));
        }
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
          const int64_t qoff = qv.offset(b, t, h);
          int64_t ldq, lddo, ldo, lddq;
          const G* qh = head_operand<G>(pq + qoff, t, qv.stride(), d, q_buf, ldq);
          const G* doh = head_operand<G>(pdo + qoff, t, qv.stride(), d, do_buf, lddo);
          const G* oh = head_operand<G>(po + qoff, t, qv.stride(), d, o_buf, ldo);
          G* dqh = out_operand<G>(pdq + qoff, qv.stride(), t, d, dq_buf, lddq);
          const float* lh = pl + (b * hq + h) * t;
          for (int64_t i0 = 0; i0 < t; i0 += kTile) {
            // The tile's queries see keys k0 .. k0 + keys - 1 (their own positions are i0 ..).
            const int64_t rows = std::min(kTile, t - i0), k0 = first_key(i0, window), keys = i0 + rows - k0;
            const G* kt = kh + k0 * ldk;
            const G* vt = vh + k0 * ldv;
            float* p = grown(p_buf, rows * keys);
            float* dp = grown(dp_buf, rows * keys);
            G* p_op = operand_rows<G>(p, p_ops, rows * keys);
            G* ds_op = operand_rows<G>(dp, ds_ops, rows * keys);
            float* delta = grown(delta_buf, rows);
            // P = exp(scale Q K^T - lse) on the causal triangle (or window's band), 0 elsewhere.
            gemm(false, true, rows, keys, d, scale, qh + i0 * ldq, ldq, kt, ldk, 0.f, p, keys);
            // dP = dO V^T
            gemm(false, true, rows, keys, d, 1.f, doh + i0 * lddo, lddo, vt, ldv, 0.f, dp, keys);
            for (int64_t r = 0; r < rows; r++) {
              const auto* dor = doh + (i0 + r) * lddo;
              const auto* orow = oh + (i0 + r) * ldo;
              delta[r] = lane_sum<float, kSoftmaxLanes>(d, [&](int64_t j) { return load(dor, j) * load(orow, j); });
            }
            softmax_backward_rows<T>(p_op, ds_op, p, dp, lh, delta, i0, rows, k0, keys, window);
            // dQ_tile = scale dS K ; dK += scale dS^T Q_tile ; dV += P^T dO_tile (key rows k0 ..)
            gemm(false, false, rows, d, keys, scale, ds_op, keys, kt, ldk, 0.f, dqh + i0 * lddq, lddq);
            gemm(true, false, keys, d, rows, scale, ds_op, keys, qh + i0 * ldq, ldq, 1.f, dkh + k0 * lddk, lddk);
            gemm(true, false, keys, d, rows, 1.f, p_op, keys, doh + i0 * lddo, lddo, 1.f, dvh + k0 * lddv, lddv);
          }
          if constexpr (!std::is_same_v<G, T>)
            convert_rows(pdq + qoff, qv.stride(), static_cast<const float*>(dqh), d, t, d);
        }
        if constexpr (!std::is_same_v<T, float>) {
          convert_rows(dkh_out, kvv.stride(), static_cast<const float*>(dkh), d, t, d);
          convert_rows(dvh_out, kvv.stride(), static_cast<const float*>(dvh), d, t, d);
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                   const Tensor& v, int64_t kv_len, float scale, int64_t window) {
  // bf16 runs on the bf16 matmul where the shapes repeat: training and a prompt's prefill (no
  // cached keys before the queries). Decoding from a KV cache widens to f32 for sgemm instead: its
  // key count grows by one every token, and each new GEMM shape would JIT a oneDNN primitive
  // (0.1-1 ms, kept for the process) for one use (Note [bf16 matmul on the CPU] in matmul.cpp).
  with_act_type(q.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (kv_len == q.dim(1))
      attention_forward_impl<T, Operand<T>>(out, lse, q, k, v, kv_len, scale, window);
    else
      attention_forward_impl<T, float>(out, lse, q, k, v, kv_len, scale, window);
  });
}

void CpuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, float scale, int64_t window) {
  with_act_type(q.dtype(), [&](auto tag) {
    attention_backward_impl<std::remove_pointer_t<decltype(tag)>>(dq, dk, dv, dout, q, k, v, out, lse, scale,
                                                                  window);
  });
}

}  // namespace nanoddp::ops::cpu
