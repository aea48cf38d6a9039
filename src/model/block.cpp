// The transformer block's two sublayers, forward and backward, and the embedding's forward.
// Buffers are described in workspace.h. Each weight gradient is written by one GEMM (beta = 0),
// into .grad or, when accumulating, into a scratch added to .grad after (Note [accumulation order]
// in gpt.cpp), and is announced through `ready` as soon as it is final.
#include <algorithm>
#include <cmath>

#include "model/gpt.h"
#include "model/workspace.h"
#include "ops/ops.h"

namespace nanoddp::model {

// Note [fp8 layers]
// nanochat's Float8Linear (nanochat/fp8.py, tensorwise recipe) replaces each of a converted layer's
// three GEMMs by a scaled FP8 one (ops::matmul_fp8, Note [fp8 tensorwise scaling] in ops/fp8_math.h):
//   forward      y  = x W^T    x e4m3, W e4m3, fast accumulation
//   input grad   dx = dy W     dy e5m2, W e4m3
//   weight grad  dW = dy^T x   dy e5m2, x e4m3
// W is quantized from the f32 master weight, as nanochat quantizes its fp32 parameter (not from the
// bf16 compute copy, which would round twice). nanochat quantizes x, W and dy once and keeps the codes
// for the backward; quantizing again from the same tensors gives the same codes, so only the work
// differs. The outputs keep their types (activations bf16, weight gradients f32, which nanochat gets
// in bf16 and adds to its f32 .grad). One difference: the LM head runs in row chunks (head.cpp), so its
// activations and logit gradients are scaled per chunk, not per whole micro-batch.
bool fp8_converts(int64_t in_features, int64_t out_features) {
  return in_features % 16 == 0 && out_features % 16 == 0 && std::min(in_features, out_features) >= 128;
}

bool GPT::fp8_gemm(const Parameter& w) const { return fp8_step_ && fp8_converts(w.data.dim(1), w.data.dim(0)); }

// y[N, out] (+)= x[N, in] W^T
void GPT::linear(const Tensor& y, const Tensor& x, const Parameter& w, float beta) {
  if (fp8_gemm(w))
    ops::matmul_fp8(y, x, false, w.data, true, {ops::Fp8Format::E4M3, ops::Fp8Format::E4M3, true}, beta);
  else
    ops::matmul(y, x, false, w.compute, true, 1.f, beta);
}

// dx[N, in] (+)= dy[N, out] W
void GPT::linear_input_grad(const Tensor& dx, const Tensor& dy, const Parameter& w, float beta) {
  if (fp8_gemm(w))
    ops::matmul_fp8(dx, dy, false, w.data, false, {ops::Fp8Format::E5M2, ops::Fp8Format::E4M3, false}, beta);
  else
    ops::matmul(dx, dy, false, w.compute, false, 1.f, beta);
}

// g[out, in] (+)= dy[N, out]^T x[N, in]
void GPT::weight_grad_gemm(const Tensor& g, const Tensor& dy, const Tensor& x, const Parameter& w, float beta) {
  if (fp8_gemm(w))
    ops::matmul_fp8(g, dy, true, x, false, {ops::Fp8Format::E5M2, ops::Fp8Format::E4M3, false}, beta);
  else
    ops::matmul(g, dy, true, x, false, 1.f, beta);
}

// grad(W)[out, in] (+)= dy[N, out]^T x[N, in]
void GPT::linear_weight_grad(Parameter& w, const Tensor& dy, const Tensor& x, bool accumulate) {
  weight_grad_gemm(micro_grad(w, accumulate), dy, x, w, 0.f);
  add_micro_grad(w, accumulate);
}

namespace {

// Per-head RMSNorm: rows of head_dim.
Tensor heads_as_rows(const Tensor& t) { return t.view({t.numel() / t.dim(-1), t.dim(-1)}); }

// 1 / sqrt(head_dim); recipe 2026 scales q and k by 1.2 each after their norm, folded in here.
float attention_scale(const GPTConfig& c) {
  const float qk = c.is_2026() ? 1.2f * 1.2f : 1.f;
  return qk / std::sqrt(static_cast<float>(c.head_dim()));
}

}  // namespace

void GPT::embed_forward(Workspace& ws) {
  const Tensor raw = ws.dx;  // scratch: the forward does not need dx yet
  ops::embedding_forward(raw, params_[wte_].compute, ws.ids);
  ops::rmsnorm_forward(ws.emb, ws.rstd_e, raw, kNormEps);
  ops::cast(ws.x, ws.emb);  // the residual stream starts at norm(wte[ids])
}

void GPT::attention_forward(Workspace& ws, int layer, KVCache* cache) {
  LayerActs& a = ws.layers[layer];
  const BlockWeights& w = blocks_[layer];
  const int64_t n = ws.tokens, c = config_.n_embd, ckv = config_.kv_dim();
  const int64_t pos0 = cache ? cache->length_ : 0;
  ops::rmsnorm_forward(a.xn1, a.rstd1, ws.x, kNormEps);
  // q, k before rotary and norm go to the backward scratch dq, dk (free during the forward).
  linear(ws.dq.view({n, c}), a.xn1, params_[w.c_q]);
  linear(ws.dk.view({n, ckv}), a.xn1, params_[w.c_k]);
  linear(a.v.view({n, ckv}), a.xn1, params_[w.c_v]);
  if (w.value_embed >= 0) value_gate_forward(ws, layer);
  ops::rotary(ws.dq, ws.dq, rope_cos_, rope_sin_, pos0, false);
  ops::rotary(ws.dk, ws.dk, rope_cos_, rope_sin_, pos0, false);
  ops::rmsnorm_forward(heads_as_rows(a.qn), a.rstd_q, heads_as_rows(ws.dq), kNormEps);
  ops::rmsnorm_forward(heads_as_rows(a.kn), a.rstd_k, heads_as_rows(ws.dk), kNormEps);
  const float scale = attention_scale(config_);
  const int64_t window = config_.window(layer);
  if (cache == nullptr) {
    ops::attention_forward(a.att, a.lse, a.qn, a.kn, a.v, ws.seq, scale, window);
  } else {
    // Append this step's keys and values at positions [pos0, pos0 + T) of each batch row.
    const int64_t row = config_.kv_dim(), t = ws.seq;
    for (int64_t b = 0; b < ws.batch; b++) {
      const int64_t dst = (b * cache->capacity_ + pos0) * row, src = b * t * row;
      ops::cast(cache->k_[layer].region(dst, {t * row}), a.kn.region(src, {t * row}));
      ops::cast(cache->v_[layer].region(dst, {t * row}), a.v.region(src, {t * row}));
    }
    ops::attention_forward(a.att, a.lse, a.qn, cache->k_[layer], cache->v_[layer], pos0 + t, scale, window);
  }
  // x += att c_proj^T
  linear(ws.x, a.att.view({n, c}), params_[w.attn_proj], 1.f);
}

void GPT::mlp_forward(Workspace& ws, int layer) {
  LayerActs& a = ws.layers[layer];
  const BlockWeights& w = blocks_[layer];
  ops::rmsnorm_forward(a.xn2, a.rstd2, ws.x, kNormEps);
  linear(a.h, a.xn2, params_[w.c_fc]);
  ops::relu2_forward(ws.a, a.h);
  linear(ws.x, ws.a, params_[w.mlp_proj], 1.f);  // x += relu(h)^2 c_proj^T
}

// On entry ws.dx = dL/d(block output); on exit dL/d(x after attention).
void GPT::mlp_backward(Workspace& ws, int layer, bool accumulate, const GradReadyFn& ready) {
  LayerActs& a = ws.layers[layer];
  const BlockWeights& w = blocks_[layer];
  ops::relu2_forward(ws.a, a.h);  // recomputed: cheaper than keeping [N, 4C] per layer
  linear_weight_grad(params_[w.mlp_proj], ws.dx, ws.a, accumulate);
  ready(w.mlp_proj);
  linear_input_grad(ws.dh, ws.dx, params_[w.mlp_proj]);  // d relu^2 output [N, 4C]
  ops::relu2_backward(ws.dh, ws.dh, a.h);
  linear_weight_grad(params_[w.c_fc], ws.dh, a.xn2, accumulate);
  ready(w.c_fc);
  linear_input_grad(ws.dxn, ws.dh, params_[w.c_fc]);
  ops::rmsnorm_backward(ws.dx, ws.dxn, a.xn2, a.rstd2, /*accumulate=*/true);  // + the residual path
}

// On entry ws.dx = dL/d(x after attention); on exit dL/d(block input).
void GPT::attention_backward(Workspace& ws, int layer, bool accumulate, const GradReadyFn& ready) {
  LayerActs& a = ws.layers[layer];
  const BlockWeights& w = blocks_[layer];
  const int64_t n = ws.tokens, c = config_.n_embd, ckv = config_.kv_dim();
  linear_weight_grad(params_[w.attn_proj], ws.dx, a.att.view({n, c}), accumulate);
  ready(w.attn_proj);
  linear_input_grad(ws.datt.view({n, c}), ws.dx, params_[w.attn_proj]);
  ops::attention_backward(ws.dq, ws.dk, ws.dv, ws.datt, a.qn, a.kn, a.v, a.att, a.lse, attention_scale(config_),
                          config_.window(layer));
  // Back through the QK norm (in place) and the rotation (its inverse).
  ops::rmsnorm_backward(heads_as_rows(ws.dq), heads_as_rows(ws.dq), heads_as_rows(a.qn), a.rstd_q, false);
  ops::rmsnorm_backward(heads_as_rows(ws.dk), heads_as_rows(ws.dk), heads_as_rows(a.kn), a.rstd_k, false);
  ops::rotary(ws.dq, ws.dq, rope_cos_, rope_sin_, 0, true);
  ops::rotary(ws.dk, ws.dk, rope_cos_, rope_sin_, 0, true);
  const Tensor dq = ws.dq.view({n, c}), dk = ws.dk.view({n, ckv}), dv = ws.dv.view({n, ckv});
  linear_weight_grad(params_[w.c_v], dv, a.xn1, accumulate);
  ready(w.c_v);
  linear_weight_grad(params_[w.c_k], dk, a.xn1, accumulate);
  ready(w.c_k);
  linear_weight_grad(params_[w.c_q], dq, a.xn1, accumulate);
  ready(w.c_q);
  linear_input_grad(ws.dxn, dq, params_[w.c_q]);
  linear_input_grad(ws.dxn, dk, params_[w.c_k], 1.f);
  linear_input_grad(ws.dxn, dv, params_[w.c_v], 1.f);
  if (w.value_embed >= 0) value_gate_backward(ws, layer, accumulate, ready);
  ops::rmsnorm_backward(ws.dx, ws.dxn, a.xn1, a.rstd1, /*accumulate=*/true);
}

}  // namespace nanoddp::model
