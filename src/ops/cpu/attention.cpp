// Causal softmax attention on the CPU, with grouped-query heads.
//
// Work is split by (batch, head) and, inside, by tiles of kTile queries: a tile of queries
// [i0, i1) needs keys [0, last(i1-1)], so the scores of a tile are one GEMM of
// [i1-i0, D] x [D, keys] and the masked upper triangle costs at most half a tile. Only the
// log-sum-exp of each score row is kept for backward, which recomputes the probabilities
// (flash-attention's trade: a little more compute, no [T, T] tensor per head in memory).
//
// bf16 or f16 storage (Note [bf16 activations on the CPU] in kernels.h): each head is widened to f32
// once per task, the GEMMs run in f32 on operands holding bf16 (f16) values, and results are rounded
// once at the store.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vecmath.h"

namespace nanoddp::ops::cpu {

namespace {

constexpr int64_t kTile = 128;

// Layout of one head inside a [B, T, H, D] tensor.
struct HeadView {
  int64_t h, d;
  int64_t stride() const { return h * d; }
  int64_t offset(int64_t b, int64_t t_len, int64_t head) const { return b * t_len * h * d + head * d; }
};

// One head's rows [rows, d] (row stride ld) as f32: the rows themselves for f32 storage, else
// widened into buf with row stride d. `ld_out` receives the stride of what is returned.
const float* head_f32(const float* src, int64_t, int64_t ld, int64_t, std::vector<float>&, int64_t& ld_out) {
  ld_out = ld;
  return src;
}
template <typename T>
const float* head_f32(const T* src, int64_t rows, int64_t ld, int64_t d, std::vector<float>& buf,
                      int64_t& ld_out) {
  float* dst = grown(buf, rows * d);
  for (int64_t r = 0; r < rows; r++) {
    if constexpr (std::is_same_v<T, f16>) {
      widen_f16(dst + r * d, src + r * ld, d);  // the conversion instructions (kernels.h)
    } else {
#pragma omp simd
      for (int64_t j = 0; j < d; j++) dst[r * d + j] = load(src + r * ld, j);
    }
  }
  ld_out = d;
  return dst;
}

// Rows [rows, d] of f32 results written to a head (row stride ld), rounded once each.
template <typename T>
void store_head(T* dst, int64_t ld, const float* src, int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; r++) {
    if constexpr (std::is_same_v<T, f16>) {
      narrow_f16(dst + r * ld, src + r * d, d);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < d; j++) store(dst + r * ld, j, src[r * d + j]);
    }
  }
}

// Where a head's f32 results go: straight into f32 storage, or into buf for store_head.
float* out_f32(float* dst, int64_t ld, int64_t, int64_t, std::vector<float>&, int64_t& ld_out) {
  ld_out = ld;
  return dst;
}
template <typename T>
float* out_f32(T*, int64_t, int64_t rows, int64_t d, std::vector<float>& buf, int64_t& ld_out) {
  ld_out = d;
  return grown(buf, rows * d);
}

// With bf16 (f16) activations the probabilities P and the score gradient dS are rounded to bf16
// (f16) before they enter a GEMM, where the CUDA flash kernels round them for the tensor cores.
// bf16 rounds in the loop that computes them (gemm_operand: an add and a mask, vectorised); f16
// after it, a row at a time on the conversion instructions (round_gemm_operands), which take about
// a third of the time of the portable conversions (convert.cpp).
template <typename T>
inline float gemm_operand(float x) {
  if constexpr (std::is_same_v<T, f16>) {
    return x;
  } else {
    return round_to<T>(x);
  }
}
template <typename T>
void round_gemm_operands(float* p, int64_t n) {
  if constexpr (std::is_same_v<T, f16>) round_f16(p, n);
}

template <typename T>
void attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            int64_t kv_len, float scale) {
  const int64_t batch = q.dim(0), tq = q.dim(1), hq = q.dim(2), d = q.dim(3);
  const int64_t tcap = k.dim(1), hkv = k.dim(2), group = hq / hkv, q_pos0 = kv_len - tq;
  const HeadView qv{hq, d}, kvv{hkv, d};
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
  T* po = out.data<T>();
  float* pl = lse.data<float>();

#pragma omp parallel
  {
    thread_local std::vector<float> s_buf, q_buf, k_buf, v_buf, o_buf;
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < batch; b++) {
      for (int64_t h = 0; h < hq; h++) {
        int64_t ldq, ldk, ldv, ldo;
        const float* qh = head_f32(pq + qv.offset(b, tq, h), tq, qv.stride(), d, q_buf, ldq);
        const float* kh = head_f32(pk + kvv.offset(b, tcap, h / group), kv_len, kvv.stride(), d, k_buf, ldk);
        const float* vh = head_f32(pv + kvv.offset(b, tcap, h / group), kv_len, kvv.stride(), d, v_buf, ldv);
        T* oh_out = po + qv.offset(b, tq, h);
        float* oh = out_f32(oh_out, qv.stride(), tq, d, o_buf, ldo);
        float* lh = pl + (b * hq + h) * tq;
        for (int64_t i0 = 0; i0 < tq; i0 += kTile) {
          const int64_t rows = std::min(kTile, tq - i0), keys = q_pos0 + i0 + rows;
          float* s = grown(s_buf, rows * keys);
          // s[rows, keys] = scale * Q_tile K^T
          sgemm(false, true, rows, keys, d, scale, qh + i0 * ldq, ldq, kh, ldk, 0.f, s, keys);
          for (int64_t r = 0; r < rows; r++) {
            float* sr = s + r * keys;
            const int64_t visible = q_pos0 + i0 + r + 1;
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int64_t j = 0; j < visible; j++) mx = mx > sr[j] ? mx : sr[j];
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < visible; j++) {
              sr[j] = fast_exp(sr[j] - mx);
              sum += sr[j];
            }
            const float inv = 1.f / sum;
#pragma omp simd
            for (int64_t j = 0; j < visible; j++) sr[j] = gemm_operand<T>(sr[j] * inv);
            round_gemm_operands<T>(sr, visible);
            std::fill(sr + visible, sr + keys, 0.f);
            lh[i0 + r] = mx + std::log(sum);
          }
          // O_tile = P V
          sgemm(false, false, rows, d, keys, 1.f, s, keys, vh, ldv, 0.f, oh + i0 * ldo, ldo);
        }
        if constexpr (!std::is_same_v<T, float>) store_head(oh_out, qv.stride(), oh, tq, d);
      }
    }
  }
}

template <typename T>
void attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             float scale) {
  const int64_t batch = q.dim(0), t = q.dim(1), hq = q.dim(2), d = q.dim(3);
  const int64_t hkv = k.dim(2), group = hq / hkv;
  const HeadView qv{hq, d}, kvv{hkv, d};
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
  const T *pdo = dout.data<T>(), *po = out.data<T>();
  const float* pl = lse.data<float>();
  T *pdq = dq.data<T>(), *pdk = dk.data<T>(), *pdv = dv.data<T>();

  // One task per (batch, kv head): the query heads of a group all add into the same dk, dv rows.
#pragma omp parallel
  {
    thread_local std::vector<float> p_buf, dp_buf, delta_buf, k_buf, v_buf, dk_buf, dv_buf, q_buf, do_buf, o_buf,
        dq_buf;
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < batch; b++) {
      for (int64_t g = 0; g < hkv; g++) {
        int64_t ldk, ldv, lddk, lddv;
        const float* kh = head_f32(pk + kvv.offset(b, t, g), t, kvv.stride(), d, k_buf, ldk);
        const float* vh = head_f32(pv + kvv.offset(b, t, g), t, kvv.stride(), d, v_buf, ldv);
        T* dkh_out = pdk + kvv.offset(b, t, g);
        T* dvh_out = pdv + kvv.offset(b, t, g);
        float* dkh = out_f32(dkh_out, kvv.stride(), t, d, dk_buf, lddk);
        float* dvh = out_f32(dvh_out, kvv.stride(), t, d, dv_buf, lddv);
        for (int64_t i = 0; i < t; i++) {
          std::memset(dkh + i * lddk, 0, d * sizeof(float));
          std::memset(dvh + i * lddv, 0, d * sizeof(float));
        }
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
          const int64_t qoff = qv.offset(b, t, h);
          int64_t ldq, lddo, ldo, lddq;
          const float* qh = head_f32(pq + qoff, t, qv.stride(), d, q_buf, ldq);
          const float* doh = head_f32(pdo + qoff, t, qv.stride(), d, do_buf, lddo);
          const float* oh = head_f32(po + qoff, t, qv.stride(), d, o_buf, ldo);
          float* dqh = out_f32(pdq + qoff, qv.stride(), t, d, dq_buf, lddq);
          const float* lh = pl + (b * hq + h) * t;
          for (int64_t i0 = 0; i0 < t; i0 += kTile) {
            const int64_t rows = std::min(kTile, t - i0), keys = i0 + rows;
            float* p = grown(p_buf, rows * keys);
            float* dp = grown(dp_buf, rows * keys);
            float* delta = grown(delta_buf, rows);
            // P = exp(scale Q K^T - lse) on the causal triangle, 0 above it.
            sgemm(false, true, rows, keys, d, scale, qh + i0 * ldq, ldq, kh, ldk, 0.f, p, keys);
            // dP = dO V^T
            sgemm(false, true, rows, keys, d, 1.f, doh + i0 * lddo, lddo, vh, ldv, 0.f, dp, keys);
            for (int64_t r = 0; r < rows; r++) {
              const float* dor = doh + (i0 + r) * lddo;
              const float* orow = oh + (i0 + r) * ldo;
              float dot = 0;
#pragma omp simd reduction(+ : dot)
              for (int64_t j = 0; j < d; j++) dot += dor[j] * orow[j];
              delta[r] = dot;
            }
            for (int64_t r = 0; r < rows; r++) {
              float* pr = p + r * keys;
              float* dpr = dp + r * keys;
              const int64_t visible = i0 + r + 1;
              const float l = lh[i0 + r], dl = delta[r];
#pragma omp simd
              for (int64_t j = 0; j < visible; j++) {
                const float pj = fast_exp(pr[j] - l);
                dpr[j] = gemm_operand<T>(pj * (dpr[j] - dl));  // dS
                pr[j] = gemm_operand<T>(pj);
              }
              round_gemm_operands<T>(dpr, visible);
              round_gemm_operands<T>(pr, visible);
              std::fill(pr + visible, pr + keys, 0.f);
              std::fill(dpr + visible, dpr + keys, 0.f);
            }
            // dQ_tile = scale dS K ; dK += scale dS^T Q_tile ; dV += P^T dO_tile
            sgemm(false, false, rows, d, keys, scale, dp, keys, kh, ldk, 0.f, dqh + i0 * lddq, lddq);
            sgemm(true, false, keys, d, rows, scale, dp, keys, qh + i0 * ldq, ldq, 1.f, dkh, lddk);
            sgemm(true, false, keys, d, rows, 1.f, p, keys, doh + i0 * lddo, lddo, 1.f, dvh, lddv);
          }
          if constexpr (!std::is_same_v<T, float>) store_head(pdq + qoff, qv.stride(), dqh, t, d);
        }
        if constexpr (!std::is_same_v<T, float>) {
          store_head(dkh_out, kvv.stride(), dkh, t, d);
          store_head(dvh_out, kvv.stride(), dvh, t, d);
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                   const Tensor& v, int64_t kv_len, float scale) {
  with_act_type(q.dtype(), [&](auto tag) {
    attention_forward_impl<std::remove_pointer_t<decltype(tag)>>(out, lse, q, k, v, kv_len, scale);
  });
}

void CpuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, float scale) {
  with_act_type(q.dtype(), [&](auto tag) {
    attention_backward_impl<std::remove_pointer_t<decltype(tag)>>(dq, dk, dv, dout, q, k, v, out, lse, scale);
  });
}

}  // namespace nanoddp::ops::cpu
