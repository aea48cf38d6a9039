// nanoddp serve's model thread (chat/serve_queue.h says why there is one) and the events it
// streams back: Server-Sent Events carrying JSON.
//
// Per job: data: {"token": "..."} per piece of UTF-8 text of the reply (the stop id is not text:
// Note [reply stop]), then data: {"done": true, "tokens": N, "finish": F, "dropped_messages": K},
// F being OpenAI's finish_reason (stop, length, or context when the model's context cut it short);
// or data: {"error": "..."} when generation fails or the server stops.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "chat/serve_queue.h"
#include "data/tokenizer.h"
#include "model/gpt.h"

namespace nanoddp::chat {

// JSON for clients: text the model made may be invalid UTF-8, which JSON cannot carry; such bytes
// become U+FFFD instead of failing the reply. Fields keep the order written ("done" first).
std::string to_json(const nlohmann::ordered_json& j);
// One Server-Sent Event: "data: JSON\n\n".
std::string sse_event(const nlohmann::ordered_json& j);

// Replies to each job of `queue` in turn, streaming its events, on the calling thread (the one that
// loaded the model); returns once the queue stops. Nothing escapes: a failed generation is
// reported to its client and on stderr, and the next job runs.
void serve_jobs(JobQueue& queue, model::GPT& model, const data::Tokenizer& tok);

}  // namespace nanoddp::chat
