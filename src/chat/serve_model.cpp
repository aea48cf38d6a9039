#include "chat/serve_model.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <exception>

#include "chat/text_stream.h"
#include "model/generate.h"

namespace nanoddp::chat {

std::string to_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::ordered_json& j) { return "data: " + to_json(j) + "\n\n"; }

namespace {
// Thrown from the token callback to end a generation whose client is gone or when stopping.
struct Abandoned {};
}  // namespace

void serve_jobs(JobQueue& queue, model::GPT& model, const data::Tokenizer& tok) {
  while (auto job = queue.next()) {
    if (job->cancelled()) {  // the client left while it waited
      job->finish();
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    Utf8Pieces text(tok);
    try {
      const auto out = model::generate(model, job->prompt, job->options, [&](int32_t id) {
        if (job->cancelled() || queue.stopping()) throw Abandoned{};
        if (job->options.stops(id)) return;
        if (std::string piece = text.add(id); !piece.empty()) job->push(sse_event({{"token", piece}}));
      });
      if (std::string rest = text.finish(); !rest.empty()) job->push(sse_event({{"token", rest}}));
      // Why the reply ended, as OpenAI's finish_reason: the model stopped, max_tokens, or the
      // model's context filled up (the reply is cut short, and the client can say so).
      job->push(sse_event({{"done", true}, {"tokens", text.tokens()},
                           {"finish", model::generation_end_name(model::generation_end(out, job->options))},
                           {"dropped_messages", job->dropped_messages}}));
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print("reply: {} tokens in {:.2f} s, {} waiting\n", text.tokens(), seconds, queue.waiting());
    } catch (const Abandoned&) {
      if (!job->cancelled()) job->push(sse_event({{"error", "the server is stopping"}}));
    } catch (const std::exception& e) {
      job->push(sse_event({{"error", std::string("generation failed: ") + e.what()}}));
      fmt::print(stderr, "nanoddp serve: generation failed: {}\n", e.what());
    }
    std::fflush(stdout);
    job->finish();
  }
}

}  // namespace nanoddp::chat
