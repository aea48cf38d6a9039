// The one stop rule of a chat reply (chat, serve, eval and RL sample with it).
//
// Note [reply stop]: nanochat's engine ends an assistant's reply at <|assistant_end|>, or at
// <|bos|> when a model that has not learnt the chat format starts a new document instead. The
// stop id is generated (and kept in what generate() returns, so that generation_end() can say why
// it ended) but is not part of the reply's text, nor of the answer a reward rule reads.
#pragma once

#include <cstdint>
#include <vector>

#include "data/tokenizer.h"
#include "model/generate.h"

namespace nanoddp::chat {

// Sets the stop ids of `so` to the reply's: <|assistant_end|> and <|bos|>. Throws nanoddp::Error
// when the tokenizer has no <|assistant_end|> (a tokenizer made without nanochat's special tokens).
void set_reply_stop(model::SampleOptions& so, const data::Tokenizer& tok);

// Sampling options for a reply: the given values and the reply's stop ids.
model::SampleOptions reply_options(const data::Tokenizer& tok, int64_t max_tokens, float temperature, int64_t top_k,
                                   uint64_t seed);

// The reply's ids: `ids` as generate() returned them, without a final stop id.
std::vector<int32_t> reply_ids(std::vector<int32_t> ids, const model::SampleOptions& so);

// The reply's text (its ids decoded, the stop id left out).
std::string reply_text(const data::Tokenizer& tok, const std::vector<int32_t>& ids, const model::SampleOptions& so);

}  // namespace nanoddp::chat
