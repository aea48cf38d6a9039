#include "chat/stop_rule.h"

namespace nanoddp::chat {

void set_reply_stop(model::SampleOptions& so, const data::Tokenizer& tok) {
  so.stop_token = tok.special_id("<|assistant_end|>");
  so.also_stop = tok.bos_id();
}

model::SampleOptions reply_options(const data::Tokenizer& tok, int64_t max_tokens, float temperature, int64_t top_k,
                                   uint64_t seed) {
  model::SampleOptions so{.max_tokens = max_tokens, .temperature = temperature, .top_k = top_k, .seed = seed};
  set_reply_stop(so, tok);
  return so;
}

std::vector<int32_t> reply_ids(std::vector<int32_t> ids, const model::SampleOptions& so) {
  if (!ids.empty() && so.stops(ids.back())) ids.pop_back();
  return ids;
}

std::string reply_text(const data::Tokenizer& tok, const std::vector<int32_t>& ids, const model::SampleOptions& so) {
  return tok.decode(reply_ids(ids, so));
}

}  // namespace nanoddp::chat
