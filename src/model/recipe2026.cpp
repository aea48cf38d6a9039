// Recipe 2026's additions to the GPT (see gpt.h): initialisation, the smear, the per-layer scalar
// mix, the backout and the value-embedding gates, forward and backward. Scalar gradients
// (resid_lambdas, x0_lambdas, smear_lambda, backout_lambda) are gathered in ws.dscalars during the
// backward and moved into their parameters' grads once at its end.
#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "model/gpt.h"
#include "model/workspace.h"
#include "ops/ops.h"

namespace nanoddp::model {

namespace {

// nanochat's init_weights, by parameter name: wte N(0, 0.8); lm_head N(0, 0.001); c_q, c_k, c_v
// and the value embeddings U(-s, s), s = sqrt(3 / n_embd) (the std of N(0, 1 / n_embd)); c_fc
// U(-0.4 s, 0.4 s); both c_proj 0; the gates U(0, 0.02); resid_lambdas[i] = 1.15 - 0.10 i / (L - 1),
// x0_lambdas[i] = 0.20 - 0.15 i / (L - 1); smear_lambda 0; backout_lambda 0.2.
float init_value(const std::string& name, int64_t i, const GPTConfig& c, Rng& rng) {
  const float s = std::sqrt(3.f / static_cast<float>(c.n_embd));
  const float span = static_cast<float>(std::max<int64_t>(c.n_layer - 1, 1));
  auto uniform = [&](float lo, float hi) { return lo + (hi - lo) * rng.uniform(); };
  if (name == "transformer.wte.weight") return 0.8f * rng.normal();
  if (name == "lm_head.weight") return 0.001f * rng.normal();
  if (name == "resid_lambdas") return 1.15f - 0.10f * static_cast<float>(i) / span;
  if (name == "x0_lambdas") return 0.20f - 0.15f * static_cast<float>(i) / span;
  if (name == "smear_lambda") return 0.f;
  if (name == "backout_lambda") return 0.2f;
  if (name.ends_with("c_proj.weight")) return 0.f;
  if (name.ends_with("c_fc.weight")) return uniform(-0.4f * s, 0.4f * s);
  if (name.ends_with("gate.weight")) return uniform(0.f, 0.02f);  // smear_gate and ve_gate
  return uniform(-s, s);                                          // c_q, c_k, c_v, value_embeds
}

}  // namespace

void GPT::init_weights_2026(uint64_t seed) {
  for (auto& p : params_) {
    Tensor host = Tensor::empty(p.data.shape(), DType::F32);
    Rng rng(seed, stream_id(p.name));
    float* w = host.data<float>();
    for (int64_t i = 0; i < host.numel(); i++) w[i] = init_value(p.name, i, config_, rng);
    copy(p.data, host);
  }
  refresh_compute_weights();
}

void GPT::smear_forward(Workspace& ws, KVCache* cache) {
  const bool after_cached = cache != nullptr && cache->length_ > 0;
  ops::smear_forward(ws.x0, ws.smear_gate, ws.emb, after_cached ? cache->prev_ : Tensor(),
                     params_[scalars_.smear_gate].compute, params_[scalars_.smear_lambda].data, ws.seq);
  ops::cast(ws.x, ws.x0);
  if (cache == nullptr) return;
  // The next call's first token mixes in this call's last one: [B, C], the row t - 1 of each batch row.
  for (int64_t b = 0; b < ws.batch; b++)
    ops::cast(cache->prev_.rows(b, b + 1), ws.emb.rows((b + 1) * ws.seq - 1, (b + 1) * ws.seq));
}

void GPT::smear_backward(Workspace& ws, bool accumulate, const GradReadyFn& ready) {
  ops::axpy(ws.dx0, ws.dx, 1.f);  // x0 is also the stream entering block 0
  Parameter& gate = params_[scalars_.smear_gate];
  const int64_t layers = config_.n_layer;
  ops::smear_backward(ws.dx, micro_grad(gate, accumulate), ws.dscalars.region(2 * layers, {1}), ws.dsmear, ws.dx0,
                      ws.emb, gate.compute, params_[scalars_.smear_lambda].data, ws.smear_gate, ws.seq);
  add_micro_grad(gate, accumulate);
  ready(scalars_.smear_gate);
}

void GPT::mix_forward(Workspace& ws, int layer) {
  ops::cast(ws.layers[layer].xin, ws.x);
  ops::scalar_mix_forward(ws.x, ws.x0, params_[scalars_.resid].data.region(layer, {1}),
                          params_[scalars_.x0].data.region(layer, {1}), 1.f);
}

void GPT::mix_backward(Workspace& ws, int layer) {
  if (layer == static_cast<int>(config_.n_layer) - 1) ops::fill(ws.dx0, 0.f);  // the first mix met backward
  const int64_t layers = config_.n_layer;
  ops::scalar_mix_backward(ws.dx, ws.dx0, ws.dscalars.region(layer, {1}), ws.dscalars.region(layers + layer, {1}),
                           ws.layers[layer].xin, ws.x0, params_[scalars_.resid].data.region(layer, {1}),
                           params_[scalars_.x0].data.region(layer, {1}), 1.f);
}

void GPT::backout_forward(Workspace& ws) {
  ops::scalar_mix_forward(ws.x, ws.xmid, Tensor(), params_[scalars_.backout].data, -1.f);
}

void GPT::backout_backward(Workspace& ws) {
  ops::fill(ws.dmid, 0.f);
  ops::scalar_mix_backward(ws.dx, ws.dmid, Tensor(), ws.dscalars.region(2 * config_.n_layer + 1, {1}), ws.xmid, ws.xmid,
                           Tensor(), params_[scalars_.backout].data, -1.f);
}

void GPT::value_gate_forward(Workspace& ws, int layer) {
  LayerActs& a = ws.layers[layer];
  const BlockWeights& w = blocks_[layer];
  const Tensor ve = ws.a.region(0, {ws.tokens, config_.kv_dim()});  // value_embeds[l][ids] [N, Ckv]
  ops::embedding_forward(ve, params_[w.value_embed].compute, ws.ids);
  ops::value_gate_forward(a.v.view({ws.tokens, config_.kv_dim()}), a.gate, a.xn1, params_[w.ve_gate].compute, ve);
}

// On entry ws.dv is the gradient of v after the gate, ws.dxn that of xn1 from q, k, v; the gate's
// share is added to ws.dxn.
void GPT::value_gate_backward(Workspace& ws, int layer, bool accumulate, const GradReadyFn& ready) {
  LayerActs& a = ws.layers[layer];
  const BlockWeights& w = blocks_[layer];
  const int64_t n = ws.tokens, ckv = config_.kv_dim();
  const Tensor ve = ws.a.region(0, {n, ckv}), dve = ws.dh.region(0, {n, ckv});
  ops::embedding_forward(ve, params_[w.value_embed].compute, ws.ids);  // recomputed, as relu^2 is
  Parameter& gate = params_[w.ve_gate];
  ops::value_gate_backward(ws.dxn, micro_grad(gate, accumulate), dve, ws.dv.view({n, ckv}), a.xn1, gate.compute, ve,
                           a.gate);
  add_micro_grad(gate, accumulate);
  ready(w.ve_gate);
  Parameter& table = params_[w.value_embed];
  const Tensor dtable = micro_grad(table, accumulate);
  ops::fill(dtable, 0.f);
  ops::embedding_backward(dtable, dve, ws.ids);
  add_micro_grad(table, accumulate);
  ready(w.value_embed);
}

void GPT::finish_scalar_grads(Workspace& ws, bool accumulate, const GradReadyFn& ready) {
  const int64_t layers = config_.n_layer;
  const std::pair<int, int64_t> spans[] = {{scalars_.resid, 0},
                                           {scalars_.x0, layers},
                                           {scalars_.smear_lambda, 2 * layers},
                                           {scalars_.backout, 2 * layers + 1}};
  for (const auto& [index, offset] : spans) {
    Parameter& p = params_[index];
    const Tensor g = ws.dscalars.region(offset, p.grad.shape());
    if (accumulate)
      ops::axpy(p.grad, g, 1.f);
    else
      ops::cast(p.grad, g);
    ready(index);
  }
}

}  // namespace nanoddp::model
