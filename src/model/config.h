// The GPT's shape: nanochat's "classic" architecture sized by one knob, depth:
// n_layer = depth, model_dim = 64 * depth, n_head = ceil(model_dim / 128), head_dim =
// model_dim / n_head, n_kv_head = n_head unless set (grouped-query attention), vocabulary padded
// to a multiple of 64.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace nanoddp::model {

struct GPTConfig {
  int64_t vocab_size = 0;     // the tokenizer's ids; rows beyond it are padding
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t max_seq_len = 2048;
  float softcap = 15.f;
  float rope_base = 10000.f;

  // nanochat's sizing: model_dim = depth * aspect_ratio, heads of about head_dim_target channels.
  static GPTConfig from_depth(int64_t depth, int64_t vocab_size, int64_t max_seq_len, int64_t aspect_ratio = 64,
                              int64_t head_dim_target = 128, int64_t n_kv_head = 0);

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t kv_dim() const { return n_kv_head * head_dim(); }
  int64_t padded_vocab() const { return (vocab_size + 63) / 64 * 64; }
  // Rows of the rotary tables: nanochat precomputes 10x the context.
  int64_t rotary_rows() const { return 10 * max_seq_len; }

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
