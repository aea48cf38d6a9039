// The prompt of a conversation that must leave room for a reply (chat, serve).
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "data/conversation.h"

namespace nanoddp::chat {

// The prompt of `conv` with room for max_tokens of reply in the context: the oldest user/assistant
// turns are left out until it fits, keeping a system message (it is merged into the first remaining
// user message). When only the last message is left the reply may be cut by the context; the
// prompt itself must fit (else nanoddp::Error). `dropped` counts the messages left out.
inline std::vector<int32_t> fit_to_context(const data::Tokenizer& tok, data::Conversation& conv, int64_t max_tokens,
                                           int64_t context, int64_t& dropped) {
  const size_t first = !conv.messages.empty() && conv.messages[0].role == "system" ? 1 : 0;
  auto prompt = data::render_for_completion(tok, conv);
  while (static_cast<int64_t>(prompt.size()) + max_tokens > context && conv.messages.size() > first + 1) {
    conv.messages.erase(conv.messages.begin() + static_cast<std::ptrdiff_t>(first),
                        conv.messages.begin() + static_cast<std::ptrdiff_t>(first) + 2);
    dropped += 2;
    prompt = data::render_for_completion(tok, conv);
  }
  NANODDP_CHECK(static_cast<int64_t>(prompt.size()) < context, "the last message{} is {} tokens, longer than the "
                "model's context of {}", first ? " with the system message" : "", prompt.size(), context);
  return prompt;
}

}  // namespace nanoddp::chat
