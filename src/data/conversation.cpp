#include "data/conversation.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace nanoddp::data {

namespace {

using json = nlohmann::json;

std::vector<MessagePart> parse_content(const json& content, const std::string& role, const std::string& where) {
  std::vector<MessagePart> parts;
  if (content.is_string()) {
    parts.push_back({"text", content.get<std::string>()});
  } else if (content.is_array() && role == "assistant") {
    for (const json& p : content) {
      NANODDP_CHECK(p.is_object() && p.contains("type") && p.contains("text") && p["type"].is_string() &&
                        p["text"].is_string(),
                    "{}: an assistant content part must be {{\"type\": ..., \"text\": ...}}", where);
      const std::string type = p["type"];
      NANODDP_CHECK(type == "text" || type == "python" || type == "python_output", "{}: unknown content part type "
                    "'{}' (text, python or python_output)", where, type);
      parts.push_back({type, p["text"]});
    }
  } else {
    NANODDP_FAIL("{}: the content of a {} message must be a string{}", where, role,
                 role == "assistant" ? " or a list of parts" : "");
  }
  size_t chars = 0;
  for (const auto& p : parts) chars += p.text.size();
  NANODDP_CHECK(chars > 0, "{}: a {} message has empty content", where, role);
  return parts;
}

// Calls fn(line, "path:N") for each non-blank line of a JSONL file of `what`; at least one.
template <typename Fn>
void for_each_jsonl_line(const std::string& path, const char* what, Fn&& fn) {
  std::ifstream in(path);
  NANODDP_CHECK(in.good(), "cannot open {}: give a JSONL file of {}", path, what);
  int64_t number = 0, lines = 0;
  for (std::string line; std::getline(in, line);) {
    number++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    fn(line, fmt::format("{}:{}", path, number));
    lines++;
  }
  NANODDP_CHECK(lines > 0, "{} holds no {}", path, what);
}

}  // namespace

Conversation parse_conversation(const std::string& line, const std::string& where) {
  const json j = json::parse(line, nullptr, false);
  NANODDP_CHECK(!j.is_discarded(), "{}: not JSON", where);
  const json* messages = &j;
  if (j.is_object()) {
    NANODDP_CHECK(j.contains("messages"), "{}: a conversation is {{\"messages\": [...]}} or a list of messages", where);
    messages = &j["messages"];
  }
  NANODDP_CHECK(messages->is_array() && !messages->empty(), "{}: the messages must be a non-empty list", where);
  Conversation c;
  c.where = where;
  for (size_t i = 0; i < messages->size(); i++) {
    const json& m = (*messages)[i];
    const std::string at = fmt::format("{} message {}", where, i + 1);
    NANODDP_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content"),
                  "{}: a message is {{\"role\": ..., \"content\": ...}}", at);
    const std::string role = m["role"];
    NANODDP_CHECK(role == "system" || role == "user" || role == "assistant", "{}: unknown role '{}' (system, user "
                  "or assistant)", at, role);
    c.messages.push_back({role, parse_content(m["content"], role, at)});
  }
  // Roles: an optional system message first, then user, assistant, user, ... (nanochat's rule).
  const size_t first = c.messages[0].role == "system" ? 1 : 0;
  NANODDP_CHECK(c.messages.size() > first, "{}: a system message alone is not a conversation", where);
  for (size_t i = first; i < c.messages.size(); i++) {
    const char* want = (i - first) % 2 == 0 ? "user" : "assistant";
    NANODDP_CHECK(c.messages[i].role == want, "{} message {}: roles out of order: expected {} after {}, got {}", where,
                  i + 1, want, i == 0 ? "the start" : c.messages[i - 1].role, c.messages[i].role);
  }
  return c;
}

std::vector<Conversation> read_conversations(const std::string& path) {
  std::vector<Conversation> out;
  for_each_jsonl_line(path, "conversations", [&](const std::string& line, const std::string& where) {
    out.push_back(parse_conversation(line, where));
  });
  return out;
}

RenderedConversation render_conversation(const Tokenizer& tok, const Conversation& c, int64_t max_tokens) {
  // Looked up once per call; a tokenizer without them (gpt2) fails here, naming the token.
  auto special = [&](std::string_view name) {
    try {
      return tok.special_id(name);
    } catch (const Error&) {
      NANODDP_FAIL("tokenizer {} has no {} token: chat stages need nanochat's special tokens (use a tokenizer "
                   "trained by `nanoddp tokenizer train`, or bytes)", tok.name(), name);
    }
  };
  const int32_t bos = special("<|bos|>"), user_start = special("<|user_start|>"), user_end = special("<|user_end|>"),
                asst_start = special("<|assistant_start|>"), asst_end = special("<|assistant_end|>"),
                py_start = special("<|python_start|>"), py_end = special("<|python_end|>"),
                out_start = special("<|output_start|>"), out_end = special("<|output_end|>");
  RenderedConversation r;
  auto add = [&](int32_t id, uint8_t m) {
    r.ids.push_back(id);
    r.mask.push_back(m);
  };
  auto add_text = [&](const std::string& text, uint8_t m) {
    for (int32_t id : tok.encode(text)) add(id, m);
  };
  add(bos, 0);
  std::vector<Message> messages = c.messages;
  if (messages[0].role == "system") {
    // nanochat has no system role: the system text goes in front of the first user message.
    Message merged = messages[1];
    merged.parts[0].text = messages[0].parts[0].text + "\n\n" + merged.parts[0].text;
    messages.erase(messages.begin(), messages.begin() + 2);
    messages.insert(messages.begin(), merged);
  }
  for (const Message& m : messages) {
    if (m.role == "user") {
      add(user_start, 0);
      add_text(m.parts[0].text, 0);
      add(user_end, 0);
      continue;
    }
    add(asst_start, 0);
    for (const MessagePart& p : m.parts) {
      if (p.type == "text") {
        add_text(p.text, 1);
      } else if (p.type == "python") {
        add(py_start, 1);
        add_text(p.text, 1);
        add(py_end, 1);
      } else {  // python_output: the tool wrote it, not the model
        add(out_start, 0);
        add_text(p.text, 0);
        add(out_end, 0);
      }
    }
    add(asst_end, 1);
  }
  if (max_tokens > 0 && static_cast<int64_t>(r.ids.size()) > max_tokens) {
    r.ids.resize(max_tokens);
    r.mask.resize(max_tokens);
  }
  return r;
}

std::string trim_answer(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n.");
  // b is npos when only spaces and dots are left: empty, whatever a is.
  return a == std::string::npos || b == std::string::npos || b < a ? "" : s.substr(a, b - a + 1);
}

std::vector<Question> read_questions(const std::string& path) {
  std::vector<Question> out;
  for_each_jsonl_line(path, "questions", [&](const std::string& line, const std::string& where) {
    const json j = json::parse(line, nullptr, false);
    NANODDP_CHECK(j.is_object() && j.contains("answer") && (j["answer"].is_string() || j["answer"].is_number()),
                  "{}: a question is {{\"messages\": [...], \"answer\": ...}}", where);
    Question q{parse_conversation(line, where), j["answer"].is_string() ? j["answer"].get<std::string>()
                                                                         : j["answer"].dump()};
    // An answer that is blank once trimmed as it is compared would reward an empty completion; a
    // number JSON writes with an exponent (1e20 -> "1e+20") is never a plain decimal, so no
    // completion would match it.
    NANODDP_CHECK(!trim_answer(q.answer).empty(), "{}: the answer is empty: an empty completion would count as "
                  "right", where);
    NANODDP_CHECK(!j["answer"].is_number_float() || q.answer.find_first_of("eE") == std::string::npos,
                  "{}: the answer {} is written with an exponent: write it as a string of its digits", where,
                  q.answer);
    NANODDP_CHECK(q.conversation.messages.back().role == "user", "{}: a question's last message must be the "
                  "user's", where);
    out.push_back(std::move(q));
  });
  return out;
}

std::vector<int32_t> render_for_completion(const Tokenizer& tok, const Conversation& c) {
  NANODDP_CHECK(c.messages.back().role == "user", "{}: the conversation to complete must end with a user turn",
                c.where);
  auto r = render_conversation(tok, c);
  r.ids.push_back(tok.special_id("<|assistant_start|>"));
  return r.ids;
}

}  // namespace nanoddp::data
