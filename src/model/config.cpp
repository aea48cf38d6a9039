#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace nanoddp::model {

const char* recipe_name(Recipe r) { return r == Recipe::R2026 ? "2026" : "classic"; }

Recipe parse_recipe(const std::string& name) {
  if (name == "classic") return Recipe::Classic;
  if (name == "2026") return Recipe::R2026;
  NANODDP_FAIL("unknown recipe '{}': use classic or 2026", name);
}

GPTConfig GPTConfig::from_depth(int64_t depth, int64_t vocab_size, int64_t max_seq_len, int64_t aspect_ratio,
                                int64_t head_dim_target, int64_t n_kv_head, Recipe recipe,
                                const std::string& window_pattern) {
  NANODDP_CHECK(depth >= 1, "--depth must be at least 1 (got {})", depth);
  NANODDP_CHECK(aspect_ratio >= 1 && head_dim_target >= 2, "--aspect_ratio and --head_dim must be positive");
  GPTConfig c;
  c.vocab_size = vocab_size;
  c.n_layer = depth;
  c.n_embd = depth * aspect_ratio;
  c.recipe = recipe;
  if (recipe == Recipe::R2026) {
    // Width rounded up to whole heads, so every head has exactly head_dim_target channels.
    c.n_embd = (c.n_embd + head_dim_target - 1) / head_dim_target * head_dim_target;
    c.rope_base = 100000.f;
    c.window_pattern = window_pattern;
  }
  c.n_head = (c.n_embd + head_dim_target - 1) / head_dim_target;
  c.n_kv_head = n_kv_head > 0 ? n_kv_head : c.n_head;
  c.max_seq_len = max_seq_len;
  c.validate();
  return c;
}

int64_t GPTConfig::window(int64_t layer) const {
  if (!is_2026()) return 0;
  const char w = layer == n_layer - 1 ? 'L' : window_pattern[static_cast<size_t>(layer) % window_pattern.size()];
  if (w == 'L' || w == 'l') return max_seq_len;
  return (max_seq_len + 4 * 128 - 1) / (4 * 128) * 128;  // ceil(T / 4 / 128) * 128
}

void GPTConfig::validate() const {
  NANODDP_CHECK(vocab_size >= 2, "vocabulary size {} is too small", vocab_size);
  NANODDP_CHECK(n_layer >= 1 && n_embd >= 2 && n_head >= 1, "model needs layers, channels and heads (got n_layer={} "
                "n_embd={} n_head={})", n_layer, n_embd, n_head);
  NANODDP_CHECK(n_embd % n_head == 0, "model_dim {} does not divide into {} heads: choose a depth or --aspect_ratio "
                "whose model_dim is a multiple of the head count", n_embd, n_head);
  NANODDP_CHECK(head_dim() % 2 == 0, "head_dim {} must be even for rotary embeddings", head_dim());
  NANODDP_CHECK(n_kv_head >= 1 && n_head % n_kv_head == 0, "--n_kv_head {} must divide n_head {}", n_kv_head,
                n_head);
  NANODDP_CHECK(max_seq_len >= 1, "--max_seq_len must be positive");
  NANODDP_CHECK(std::isfinite(softcap) && softcap > 0, "the logit softcap must be positive (got {}): check the "
                "checkpoint's model_config", softcap);
  NANODDP_CHECK(!is_2026() || n_embd >= kSmearGateChannels, "--recipe 2026 needs a model_dim of at least {} (its "
                "smear gate reads that many channels), got {}: choose a larger --depth or --aspect_ratio, or "
                "--recipe classic", kSmearGateChannels, n_embd);
  NANODDP_CHECK(!window_pattern.empty() && window_pattern.find_first_not_of("SLsl") == std::string::npos,
                "window pattern '{}' must be letters S (short) and L (long), e.g. SSSL", window_pattern);
  NANODDP_CHECK(std::isfinite(rope_base) && rope_base > 1, "the rotary base must be above 1 (got {}): check the "
                "checkpoint's model_config", rope_base);
}

int64_t GPTConfig::num_params() const {
  int64_t attn = n_embd * n_embd * 2 + n_embd * kv_dim() * 2;  // c_q, c_proj; c_k, c_v
  int64_t mlp = 8 * n_embd * n_embd;                            // c_fc, c_proj
  int64_t total = n_layer * (attn + mlp) + 2 * padded_vocab() * n_embd;
  if (!is_2026()) return total;
  for (int64_t l = 0; l < n_layer; l++)  // value embeddings and their gates
    if (has_value_embedding(l)) total += padded_vocab() * kv_dim() + n_kv_head * kValueGateChannels;
  return total + 2 * n_layer + kSmearGateChannels + 2;  // resid, x0 lambdas; smear gate, smear and backout lambdas
}

// The embeddings (wte, value embeddings) are lookups and the per-layer scalars elementwise: they
// are not counted. In recipe 2026 each layer's attention term is capped by its window, as
// nanochat's estimate_flops does.
double GPTConfig::flops_per_token(int64_t seq_len) const {
  double matmul = static_cast<double>(num_params() - padded_vocab() * n_embd);
  double attention = 12.0 * n_layer * n_head * head_dim() * seq_len;
  if (is_2026()) {
    matmul -= static_cast<double>(2 * n_layer + 2);  // the scalars; the smear gate is a Linear
    attention = 0;
    for (int64_t l = 0; l < n_layer; l++) {
      if (has_value_embedding(l)) matmul -= static_cast<double>(padded_vocab() * kv_dim());
      attention += 12.0 * n_head * head_dim() * static_cast<double>(std::min(window(l), seq_len));
    }
  }
  return 6.0 * matmul + attention;
}

nlohmann::json GPTConfig::to_json() const {
  return {{"vocab_size", vocab_size}, {"n_layer", n_layer},         {"n_embd", n_embd},
          {"n_head", n_head},         {"n_kv_head", n_kv_head},     {"max_seq_len", max_seq_len},
          {"softcap", softcap},       {"rope_base", rope_base},     {"recipe", recipe_name(recipe)},
          {"window_pattern", window_pattern}};
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j) {
  GPTConfig c;
  try {
    j.at("vocab_size").get_to(c.vocab_size);
    j.at("n_layer").get_to(c.n_layer);
    j.at("n_embd").get_to(c.n_embd);
    j.at("n_head").get_to(c.n_head);
    j.at("n_kv_head").get_to(c.n_kv_head);
    j.at("max_seq_len").get_to(c.max_seq_len);
    c.softcap = j.value("softcap", 15.f);
    c.rope_base = j.value("rope_base", 10000.f);
    c.recipe = parse_recipe(j.value("recipe", std::string("classic")));  // older checkpoints: classic
    c.window_pattern = j.value("window_pattern", std::string("L"));
  } catch (const nlohmann::json::exception& e) {
    NANODDP_FAIL("model config is incomplete or malformed: {}", e.what());
  }
  c.validate();
  return c;
}

}  // namespace nanoddp::model
