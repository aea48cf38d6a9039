// Conversations for the chat stages (SFT, RL, evaluation, chat), rendered into token ids with
// nanochat's special tokens and a loss mask that is 1 exactly where the model is trained to speak.
//
// Input: JSONL, one conversation per line, in the standard chat format:
//   {"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}   or a bare array
//   of such messages (nanochat's CustomJSON). An assistant's content is a string, or a list of
//   parts {"type": "text"|"python"|"python_output", "text": "..."} (tool use).
// Rendering (nanochat's render_conversation):
//   <|bos|>  then per message
//   user:       <|user_start|> text <|user_end|>                                   mask 0
//   assistant:  <|assistant_start|>                                                mask 0
//               text | <|python_start|> code <|python_end|>                        mask 1
//               <|output_start|> tool output <|output_end|>                        mask 0
//               <|assistant_end|>                                                  mask 1
// A system message is merged into the first user message (system + "\n\n" + user), as nanochat
// does; after it, roles alternate user, assistant, user, ...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace nanoddp::data {

struct MessagePart {
  std::string type;  // "text", "python" or "python_output"
  std::string text;
};

struct Message {
  std::string role;  // "system", "user" or "assistant"
  std::vector<MessagePart> parts;  // a string content is one "text" part
};

struct Conversation {
  std::vector<Message> messages;
  std::string where;  // "file:line", for errors found later
};

struct RenderedConversation {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // 1: the model is trained to produce this token
};

// Reads every conversation of a JSONL file. Throws nanoddp::Error naming file:line and what is
// wrong: not JSON, no messages, an unknown role, roles out of order, empty content.
std::vector<Conversation> read_conversations(const std::string& path);

// Parses one conversation (a JSON line); `where` names it in errors.
Conversation parse_conversation(const std::string& json_line, const std::string& where);

// A question for RL and evaluation: a conversation ending with a user turn, and the answer a
// completion must reach (data/tasks.h's answer_is_correct).
struct Question {
  Conversation conversation;
  std::string answer;
};

// What of an answer (or a completion's answer line) is compared: `s` without surrounding spaces
// and trailing dots ("14." is 14).
std::string trim_answer(const std::string& s);

// Reads JSONL lines {"messages": [..., user], "answer": "..."} (`nanoddp task --format questions`).
std::vector<Question> read_questions(const std::string& path);

// The prompt the model completes: `c` (ending with a user turn) rendered, then <|assistant_start|>.
std::vector<int32_t> render_for_completion(const Tokenizer& tok, const Conversation& c);

// Renders `c`, keeping at most max_tokens tokens (0: all). Throws nanoddp::Error when the
// tokenizer lacks nanochat's special tokens (gpt2, say), naming the missing one.
RenderedConversation render_conversation(const Tokenizer& tok, const Conversation& c, int64_t max_tokens = 0);

}  // namespace nanoddp::data
