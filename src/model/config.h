// The GPT's shape: nanochat's architecture sized by one knob, depth. Classic (late 2025): n_layer =
// depth, model_dim = 64 * depth, n_head = ceil(model_dim / 128), head_dim = model_dim / n_head.
// Recipe 2026 (nanochat as of commit 92d63d4): model_dim = depth * 64 rounded up to a multiple of
// the head size, so head_dim is exactly 128; rotary base 100,000; sliding windows tiled from a
// pattern of S (short: a quarter of the context rounded up to 128) and L (the whole context), the
// last layer always L. Both: n_kv_head = n_head unless set (grouped-query attention), vocabulary
// padded to a multiple of 64.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace nanoddp::model {

// Which of nanochat's architectures (docs/recipe2026.md): the classic GPT or today's, with value
// embeddings, smear, backout, per-layer scalars and sliding windows.
enum class Recipe { Classic, R2026 };

const char* recipe_name(Recipe r);  // "classic" or "2026"
// Throws nanoddp::Error naming the accepted values.
Recipe parse_recipe(const std::string& name);

struct GPTConfig {
  int64_t vocab_size = 0;     // the tokenizer's ids; rows beyond it are padding
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t max_seq_len = 2048;
  float softcap = 15.f;
  float rope_base = 10000.f;
  Recipe recipe = Recipe::Classic;
  std::string window_pattern = "L";  // recipe 2026: S / L per layer, tiled; the last layer is L

  // The 2026 recipe's extra channel counts: the value-embedding gate and the smear gate read the
  // first this many channels of their input.
  static constexpr int64_t kValueGateChannels = 12;
  static constexpr int64_t kSmearGateChannels = 24;

  // nanochat's sizing: model_dim = depth * aspect_ratio, heads of about head_dim_target channels.
  static GPTConfig from_depth(int64_t depth, int64_t vocab_size, int64_t max_seq_len, int64_t aspect_ratio = 64,
                              int64_t head_dim_target = 128, int64_t n_kv_head = 0,
                              Recipe recipe = Recipe::Classic, const std::string& window_pattern = "SSSL");

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t kv_dim() const { return n_kv_head * head_dim(); }
  int64_t padded_vocab() const { return (vocab_size + 63) / 64 * 64; }
  // Rows of the rotary tables: nanochat precomputes 10x the context.
  int64_t rotary_rows() const { return 10 * max_seq_len; }

  bool is_2026() const { return recipe == Recipe::R2026; }
  // Recipe 2026: layer l has a value embedding and its gate (alternating, the last layer always).
  bool has_value_embedding(int64_t layer) const { return is_2026() && layer % 2 == (n_layer - 1) % 2; }
  // The layer whose output the backout subtracts from the final residual.
  int64_t backout_layer() const { return n_layer / 2; }
  // Layer l's attention window for ops::attention_forward: 0 (full causal) in the classic model;
  // in recipe 2026 the tile of window_pattern, S = ceil(max_seq_len / 4 / 128) * 128 keys before
  // the query, L = max_seq_len.
  int64_t window(int64_t layer) const;

  // Throws nanoddp::Error explaining which constraint is broken.
  void validate() const;

  int64_t num_params() const;
  // Training FLOPs per token (PaLM's formula, as nanochat reports MFU):
  // 6 (params - wte) + 12 n_layer n_head head_dim seq_len.
  double flops_per_token(int64_t seq_len) const;

  nlohmann::json to_json() const;
  static GPTConfig from_json(const nlohmann::json& j);
  bool operator==(const GPTConfig&) const = default;
};

}  // namespace nanoddp::model
