#include "reference_gpt.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "kernel_test_util.h"
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

namespace {

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Recipe 2026's smear: e[t] += smear_lambda sigmoid(e[t, :24] . smear_gate) e[t - 1] for t >= 1.
Vec smear(const Vec& e, const Weights& w, int64_t batch, int64_t seq, int64_t C) {
  const Vec& gate = w.at("smear_gate.weight");
  Vec out = e;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 1; t < seq; t++) {
      const int64_t i = b * seq + t;
      double z = 0;
      for (size_t j = 0; j < gate.size(); j++) z += e[i * C + j] * gate[j];
      for (int64_t ch = 0; ch < C; ch++) out[i * C + ch] += w.at("smear_lambda")[0] * sigmoid(z) * e[(i - 1) * C + ch];
    }
  return out;
}

// Recipe 2026's value embedding: v += 3 sigmoid(xn[:, :12] ve_gate^T) * table[ids], per kv head.
void add_value_embedding(Vec& v, const Vec& xn, const Weights& w, const std::string& table, const std::string& gate,
                         const std::vector<int32_t>& ids, const model::GPTConfig& c) {
  const int64_t n = static_cast<int64_t>(ids.size()), hkv = c.n_kv_head, d = c.head_dim(), k = 12;
  const Vec ve = reference::embedding(w.at(table), ids, c.kv_dim());
  for (int64_t i = 0; i < n; i++)
    for (int64_t h = 0; h < hkv; h++) {
      double z = 0;
      for (int64_t j = 0; j < k; j++) z += xn[i * c.n_embd + j] * w.at(gate)[h * k + j];
      for (int64_t e = 0; e < d; e++) v[(i * hkv + h) * d + e] += 3 * sigmoid(z) * ve[(i * hkv + h) * d + e];
    }
}

}  // namespace

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
  const bool r2026 = c.is_2026();
  if (r2026) x = smear(x, w, batch, seq, C);
  const Vec x0 = x;
  Vec x_mid;
  for (int64_t l = 0; l < c.n_layer; l++) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    if (r2026)
      for (int64_t i = 0; i < n * C; i++) x[i] = w.at("resid_lambdas")[l] * x[i] + w.at("x0_lambdas")[l] * x0[i];
    Vec xn = reference::rmsnorm(x, C, eps);
    Vec q = lin(xn, h + "attn.c_q.weight", C, C), k = lin(xn, h + "attn.c_k.weight", ckv, C),
        v = lin(xn, h + "attn.c_v.weight", ckv, C);
    if (c.has_value_embedding(l))
      add_value_embedding(v, xn, w, "value_embeds." + std::to_string(l) + ".weight", h + "attn.ve_gate.weight", ids, c);
    q = reference::rmsnorm(reference::rotary(q, batch, seq, c.n_head, d, cos, sin, 0, false), d, eps);
    k = reference::rmsnorm(reference::rotary(k, batch, seq, c.n_kv_head, d, cos, sin, 0, false), d, eps);
    if (r2026)
      for (Vec* t : {&q, &k})
        for (double& e : *t) e *= 1.2;
    Vec att = reference::attention(q, k, v, batch, seq, seq, c.n_head, c.n_kv_head, d, seq, 1.0 / std::sqrt(d), nullptr,
                                   c.window(l));
    add(x, lin(att, h + "attn.c_proj.weight", C, C));
    Vec a = reference::relu2(lin(reference::rmsnorm(x, C, eps), h + "mlp.c_fc.weight", 4 * C, C));
    add(x, reference::matmul(a, false, w.at(h + "mlp.c_proj.weight"), true, n, C, 4 * C));
    if (r2026 && l == c.n_layer / 2) x_mid = x;
  }
  if (r2026)
    for (int64_t i = 0; i < n * C; i++) x[i] -= w.at("backout_lambda")[0] * x_mid[i];
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

void randomise(model::GPT& gpt, uint64_t seed) {
  Weights w;
  for (auto& p : gpt.parameters()) w[p.name] = vec(randn(p.data.shape(), seed++, 0.5f));
  set_weights(gpt, w);
}

Batch make_batch(int64_t b, int64_t t, int64_t vocab, uint64_t seed, bool with_ignored) {
  Batch out{randint({b, t}, seed, 0, vocab), randint({b, t}, seed + 1, 0, vocab), {}, {}};
  if (with_ignored) out.targets.data<int32_t>()[1] = -1;
  out.ids = ints(out.inputs);
  out.tgt = ints(out.targets);
  return out;
}

void expect_gradients_match_reference(model::GPT& gpt, const Batch& b, int64_t samples) {
  const model::GPTConfig& c = gpt.config();
  const int64_t batch = b.inputs.dim(0), seq = b.inputs.dim(1);
  const Weights w = weights_of(gpt);
  uint64_t seed = 1;
  for (auto& p : gpt.parameters()) {
    const auto idx = sample_indices(p.data.numel(), samples, seed++);
    const auto fd = reference::finite_difference(
        [&](const reference::Vec& x) {
          Weights wx = w;
          wx[p.name] = x;
          return reference_loss(c, wx, b.ids, b.tgt, batch, seq);
        },
        w.at(p.name), idx, 1e-5);
    EXPECT_LT(max_rel_error(gather(p.grad, idx), fd, 1e-6), 2e-4) << p.name;
  }
}

CommandResult run_torch_reference(const std::string& script, const std::string& dir, const model::GPT& gpt,
                                  const Tensor& inputs, const Tensor& targets, const nlohmann::json& config) {
  const std::filesystem::path d(dir);
  SafetensorsWriter w;
  for (const auto& p : gpt.parameters()) w.add(p.name, p.data);
  w.add("inputs", inputs);
  w.add("targets", targets);
  w.write((d / "input.safetensors").string());
  std::ofstream((d / "config.json").string()) << config.dump();
  return run_command("/usr/bin/python3 " NANODDP_SOURCE_DIR "/tools/" + script + " " + dir);
}

}  // namespace nanoddp::testing
