#include "reference_gpt.h"

#include <cmath>

#include "test_util.h"

namespace nanoddp::testing {

using reference::Vec;

Weights weights_of(const model::GPT& gpt) {
  Weights w;
  for (const auto& p : gpt.parameters()) w[p.name] = to_double(p.data);
  return w;
}

void set_weights(model::GPT& gpt, const Weights& w) {
  for (auto& p : gpt.parameters()) {
    const Vec& v = w.at(p.name);
    Tensor host = Tensor::empty(p.data.shape(), DType::F32);
    for (int64_t i = 0; i < host.numel(); i++) host.data<float>()[i] = static_cast<float>(v[i]);
    copy(p.data, host);
  }
  gpt.refresh_compute_weights();
}

double reference_loss(const model::GPTConfig& c, const Weights& w, const std::vector<int32_t>& ids,
                      const std::vector<int32_t>& targets, int64_t batch, int64_t seq) {
  const double eps = 1.1920929e-07;
  const int64_t n = batch * seq, d = c.head_dim(), ckv = c.kv_dim(), C = c.n_embd, vp = c.padded_vocab();
  // rotary tables exactly as the model builds them (f32 angles, bf16-rounded cos/sin)
  Vec cos(seq * d / 2), sin(seq * d / 2);
  for (int64_t i = 0; i < d / 2; i++) {
    float inv_freq = 1.f / std::pow(c.rope_base, static_cast<float>(2 * i) / static_cast<float>(d));
    for (int64_t t = 0; t < seq; t++) {
      float angle = static_cast<float>(t) * inv_freq;
      cos[t * d / 2 + i] = round_to_bf16(std::cos(angle));
      sin[t * d / 2 + i] = round_to_bf16(std::sin(angle));
    }
  }
  auto lin = [&](const Vec& x, const std::string& name, int64_t out, int64_t in) {
    return reference::matmul(x, false, w.at(name), true, n, out, in);
  };
  auto add = [](Vec& x, const Vec& y) {
    for (size_t i = 0; i < x.size(); i++) x[i] += y[i];
  };
  Vec x = reference::rmsnorm(reference::embedding(w.at("transformer.wte.weight"), ids, C), C, eps);
  for (int64_t l = 0; l < c.n_layer; l++) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    Vec xn = reference::rmsnorm(x, C, eps);
    Vec q = lin(xn, h + "attn.c_q.weight", C, C), k = lin(xn, h + "attn.c_k.weight", ckv, C),
        v = lin(xn, h + "attn.c_v.weight", ckv, C);
    q = reference::rmsnorm(reference::rotary(q, batch, seq, c.n_head, d, cos, sin, 0, false), d, eps);
    k = reference::rmsnorm(reference::rotary(k, batch, seq, c.n_kv_head, d, cos, sin, 0, false), d, eps);
    Vec att = reference::attention(q, k, v, batch, seq, seq, c.n_head, c.n_kv_head, d, seq, 1.0 / std::sqrt(d));
    add(x, lin(att, h + "attn.c_proj.weight", C, C));
    Vec a = reference::relu2(lin(reference::rmsnorm(x, C, eps), h + "mlp.c_fc.weight", 4 * C, C));
    add(x, reference::matmul(a, false, w.at(h + "mlp.c_proj.weight"), true, n, C, 4 * C));
  }
  Vec logits = lin(reference::rmsnorm(x, C, eps), "lm_head.weight", vp, C);
  Vec losses = reference::softcap_cross_entropy(logits, targets, vp, c.vocab_size, c.softcap);
  double sum = 0;
  int64_t valid = 0;
  for (int64_t i = 0; i < n; i++)
    if (targets[i] >= 0) {
      sum += losses[i];
      valid++;
    }
  return sum / valid;
}

}  // namespace nanoddp::testing
