// Causal softmax attention on the CPU, with grouped-query heads.
//
// Work is split by (batch, head) and, inside, by tiles of kTile queries: a tile of queries
// [i0, i1) needs keys [0, last(i1-1)], so the scores of a tile are one GEMM of
// [i1-i0, D] x [D, keys] and the masked upper triangle costs at most half a tile. Only the
// log-sum-exp of each score row is kept for backward, which recomputes the probabilities
// (flash-attention's trade: a little more compute, no [T, T] tensor per head in memory).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vecmath.h"

namespace nanoddp::ops::cpu {

namespace {

constexpr int64_t kTile = 128;

// Per-thread scratch that grows to the largest tile seen and is then reused.
float* scratch(std::vector<float>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Layout of one head inside a [B, T, H, D] tensor.
struct HeadView {
  int64_t h, d;
  int64_t stride() const { return h * d; }
  int64_t offset(int64_t b, int64_t t_len, int64_t head) const { return b * t_len * h * d + head * d; }
};

}  // namespace

void CpuBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       int64_t kv_len, float scale) {
  const int64_t batch = q.dim(0), tq = q.dim(1), hq = q.dim(2), d = q.dim(3);
  const int64_t tcap = k.dim(1), hkv = k.dim(2), group = hq / hkv, q_pos0 = kv_len - tq;
  const HeadView qv{hq, d}, kvv{hkv, d};
  const float *pq = q.data<float>(), *pk = k.data<float>(), *pv = v.data<float>();
  float *po = out.data<float>(), *pl = lse.data<float>();

#pragma omp parallel
  {
    thread_local std::vector<float> s_buf;
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < batch; b++) {
      for (int64_t h = 0; h < hq; h++) {
        const float* qh = pq + qv.offset(b, tq, h);
        const float* kh = pk + kvv.offset(b, tcap, h / group);
        const float* vh = pv + kvv.offset(b, tcap, h / group);
        float* oh = po + qv.offset(b, tq, h);
        float* lh = pl + (b * hq + h) * tq;
        for (int64_t i0 = 0; i0 < tq; i0 += kTile) {
          const int64_t rows = std::min(kTile, tq - i0), keys = q_pos0 + i0 + rows;
          float* s = scratch(s_buf, rows * keys);
          // s[rows, keys] = scale * Q_tile K^T
          sgemm(false, true, rows, keys, d, scale, qh + i0 * qv.stride(), qv.stride(), kh, kvv.stride(), 0.f, s,
                keys);
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
            float inv = 1.f / sum;
#pragma omp simd
            for (int64_t j = 0; j < visible; j++) sr[j] *= inv;
            std::fill(sr + visible, sr + keys, 0.f);
            lh[i0 + r] = mx + std::log(sum);
          }
          // O_tile = P V
          sgemm(false, false, rows, d, keys, 1.f, s, keys, vh, kvv.stride(), 0.f, oh + i0 * qv.stride(), qv.stride());
        }
      }
    }
  }
}

void CpuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, float scale) {
  const int64_t batch = q.dim(0), t = q.dim(1), hq = q.dim(2), d = q.dim(3);
  const int64_t hkv = k.dim(2), group = hq / hkv;
  const HeadView qv{hq, d}, kvv{hkv, d};
  const float *pq = q.data<float>(), *pk = k.data<float>(), *pv = v.data<float>();
  const float *pdo = dout.data<float>(), *po = out.data<float>(), *pl = lse.data<float>();
  float *pdq = dq.data<float>(), *pdk = dk.data<float>(), *pdv = dv.data<float>();

  // One task per (batch, kv head): the query heads of a group all add into the same dk, dv rows.
#pragma omp parallel
  {
    thread_local std::vector<float> p_buf, dp_buf, delta_buf;
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < batch; b++) {
      for (int64_t g = 0; g < hkv; g++) {
        const float* kh = pk + kvv.offset(b, t, g);
        const float* vh = pv + kvv.offset(b, t, g);
        float* dkh = pdk + kvv.offset(b, t, g);
        float* dvh = pdv + kvv.offset(b, t, g);
        for (int64_t i = 0; i < t; i++) {
          std::memset(dkh + i * kvv.stride(), 0, d * sizeof(float));
          std::memset(dvh + i * kvv.stride(), 0, d * sizeof(float));
        }
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
          const int64_t qoff = qv.offset(b, t, h);
          const float* lh = pl + (b * hq + h) * t;
          for (int64_t i0 = 0; i0 < t; i0 += kTile) {
            const int64_t rows = std::min(kTile, t - i0), keys = i0 + rows;
            const int64_t tile_off = qoff + i0 * qv.stride();
            float* p = scratch(p_buf, rows * keys);
            float* dp = scratch(dp_buf, rows * keys);
            float* delta = scratch(delta_buf, rows);
            // P = exp(scale Q K^T - lse) on the causal triangle, 0 above it.
            sgemm(false, true, rows, keys, d, scale, pq + tile_off, qv.stride(), kh, kvv.stride(), 0.f, p, keys);
            // dP = dO V^T
            sgemm(false, true, rows, keys, d, 1.f, pdo + tile_off, qv.stride(), vh, kvv.stride(), 0.f, dp, keys);
            for (int64_t r = 0; r < rows; r++) {
              const float* dor = pdo + tile_off + r * qv.stride();
              const float* orow = po + tile_off + r * qv.stride();
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
                pr[j] = fast_exp(pr[j] - l);
                dpr[j] = pr[j] * (dpr[j] - dl);  // dS
              }
              std::fill(pr + visible, pr + keys, 0.f);
              std::fill(dpr + visible, dpr + keys, 0.f);
            }
            // dQ_tile = scale dS K ; dK += scale dS^T Q_tile ; dV += P^T dO_tile
            sgemm(false, false, rows, d, keys, scale, dp, keys, kh, kvv.stride(), 0.f, pdq + tile_off, qv.stride());
            sgemm(true, false, keys, d, rows, scale, dp, keys, pq + tile_off, qv.stride(), 1.f, dkh, kvv.stride());
            sgemm(true, false, keys, d, rows, 1.f, p, keys, pdo + tile_off, qv.stride(), 1.f, dvh, kvv.stride());
          }
        }
      }
    }
  }
}

}  // namespace nanoddp::ops::cpu
