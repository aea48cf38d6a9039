// A tiny GPT with random weights over the byte tokenizer (with nanochat's special tokens), and
// one-question conversations: what the chat layer's tests sample from.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/conversation.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "test_util.h"

namespace nanoddp::testing {

// Random weights everywhere (nanochat's init zeroes lm_head, which would make every draw uniform
// and every greedy answer the same). Context of 64: the prompts below and a few tokens of answer.
inline std::unique_ptr<model::GPT> tiny_chat_model(const data::Tokenizer& tok, uint64_t seed) {
  model::GPTConfig c;
  c.vocab_size = tok.vocab_size();
  c.n_layer = 1;
  c.n_embd = 16;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.max_seq_len = 64;
  auto gpt = std::make_unique<model::GPT>(c, Device::cpu());
  for (auto& p : gpt->parameters()) copy(p.data, randn(p.data.shape(), seed++, 0.5f));
  gpt->refresh_compute_weights();
  return gpt;
}

inline data::Question question(const std::string& text, const std::string& answer) {
  data::Question q;
  q.conversation.messages.push_back({"user", {{"text", text}}});
  q.conversation.where = "the test";
  q.answer = answer;
  return q;
}

}  // namespace nanoddp::testing
