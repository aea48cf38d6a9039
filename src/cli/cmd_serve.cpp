// nanoddp serve: a chat checkpoint behind HTTP (nanochat's chat_web), with cpp-httplib.
//
//   GET  /                  the chat page (serve_page.h)
//   GET  /health            {"status": "ok"}
//   POST /chat/completions  {"messages": [{"role", "content"}...], "temperature", "top_k",
//                           "max_tokens", "seed" (each optional: the server's flags)}
//                           -> text/event-stream: data: {"token": "..."} per piece of UTF-8 text,
//                              then data: {"done": true, "tokens": N, "finish": F, "dropped_messages": K}
//                              (F: stop, length, or context when the model's context cut it short)
//                              (or data: {"error": "..."} when generation fails or the server stops)
// Errors are JSON {"error": "..."}: 400 for a request that is wrong (the message says what), 404,
// 408 for a request not sent whole within 10 s, 411 for a body without Content-Length, 413 above
// --max_request_bytes, 503 when --max_queue requests already wait or --max_connections are open.
//
// Threads: one thread reads every connection and hands whole requests to worker threads, where
// cpp-httplib routes and answers them (serve_front.h says why); the model runs on this command's
// own thread, one generation at a time, in arrival order (chat/serve_queue.h says why; chat/serve_model.h streams the replies). A request is
// validated, rendered and fitted to the context on its worker, so a bad one is answered at once,
// without waiting for the model.
//
// There is no authentication: the default --host is loopback, and any other address is warned about.
#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chat/prompt.h"
#include "chat/serve_model.h"
#include "chat/serve_queue.h"
#include "chat/stop_rule.h"
#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "cli/rank_setup.h"
#include "cli/serve_front.h"
#include "cli/serve_page.h"
#include "core/error.h"
#include "data/conversation.h"
#include "model/generate.h"
#include "train/checkpoint.h"
#include "train/model_io.h"

namespace nanoddp::cli {

namespace {

using json = nlohmann::json;
using chat::JobQueue;
using chat::ServeJob;
using chat::sse_event;
using chat::to_json;

struct ServeArgs {
  std::string checkpoint = "out";
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  double temperature = 0.6;
  int64_t top_k = 50;
  int64_t max_tokens = 256;
  uint64_t seed = 42;
  std::string data = "";
  std::string device = "cpu";
  std::string dtype = "auto";
  int64_t max_request_bytes = 64 << 10;
  int64_t max_queue = 16;
  int64_t max_connections = 256;
  template <typename V>
  void visit(V&& v) {
    v(checkpoint, "checkpoint", "Checkpoint directory, or a run's --out (its newest checkpoint)");
    v(host, "host", "Address to listen on (anything but loopback exposes an unauthenticated API)");
    v(port, "port", "TCP port (0: any free port; the chosen one is printed)");
    v(temperature, "temperature", "Default sampling temperature (0 = greedy); a request may set its own");
    v(top_k, "top_k", "Default top-k (0 = all tokens); a request may set its own");
    v(max_tokens, "max_tokens", "Default longest reply in tokens (at most the model's context)");
    v(seed, "seed", "Default seed of the sampler: a request with the same messages and seed gets the same reply");
    v(data, "data", "Dataset directory whose tokenizer to use (default: the checkpoint's)");
    v(device, "device", "cpu or cuda");
    v(dtype, "dtype", "Activations: auto (bf16 on CUDA, fp32 on the CPU), fp32, bf16 or fp16 (nanochat's --dtype)");
    v(max_request_bytes, "max_request_bytes", "Largest request body; a larger one is refused with 413");
    v(max_queue, "max_queue", "Requests that may wait for the model (1 to 1024); more are refused with 503");
    v(max_connections, "max_connections", "Open connections (1 to 512); more are refused with 503");
  }
};

void check_serve_flags(const ServeArgs& a) {
  check_sampling_flags(a.max_tokens, a.temperature, a.top_k);
  NANODDP_CHECK(!a.host.empty(), "--host must name an address to listen on (127.0.0.1: this machine only)");
  NANODDP_CHECK(a.port >= 0 && a.port <= 65535, "--port must be 0 (any free port) to 65535 (got {})", a.port);
  NANODDP_CHECK(a.max_request_bytes >= 1, "--max_request_bytes must be at least 1 (got {})", a.max_request_bytes);
  // Each waiting request holds an HTTP worker thread until its turn.
  NANODDP_CHECK(a.max_queue >= 1 && a.max_queue <= 1024, "--max_queue must be 1 to 1024 (got {})", a.max_queue);
  // cpp-httplib answers a descriptor past select()'s FD_SETSIZE (1024) with 500; 512 stays below it.
  NANODDP_CHECK(a.max_connections >= 1 && a.max_connections <= 512, "--max_connections must be 1 to 512 (got {})",
                a.max_connections);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(to_json({{"error", message}}), "application/json");
}

// "got 1.5", "got string": the value if it is a number, else its type (a string may be long).
std::string got(const json& v) { return v.is_number() ? v.dump() : v.type_name(); }

uint64_t unsigned_field(const json& body, const char* name) {
  const json& v = body[name];
  NANODDP_CHECK(v.is_number_unsigned(), "\"{}\" must be an integer >= 0 (got {})", name, got(v));
  return v.get<uint64_t>();
}

// The request's sampling values over the server's defaults. Throws nanoddp::Error naming the field.
model::SampleOptions sampling(const json& body, const ServeArgs& defaults, int64_t context) {
  model::SampleOptions so;
  so.temperature = static_cast<float>(defaults.temperature);
  so.top_k = defaults.top_k;
  so.max_tokens = defaults.max_tokens;
  so.seed = defaults.seed;
  if (body.contains("temperature")) {
    const json& v = body["temperature"];
    NANODDP_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0,
                  "\"temperature\" must be a number >= 0 (0 = greedy; got {})", got(v));
    so.temperature = v.get<float>();
  }
  // A top_k beyond the vocabulary means all of it, as --top_k does.
  if (body.contains("top_k")) so.top_k = static_cast<int64_t>(std::min<uint64_t>(unsigned_field(body, "top_k"), 1u << 30));
  if (body.contains("max_tokens")) {
    const uint64_t n = unsigned_field(body, "max_tokens");
    NANODDP_CHECK(n >= 1 && n <= static_cast<uint64_t>(context), "\"max_tokens\" must be 1 to {} (the model's "
                  "context; got {})", context, n);
    so.max_tokens = static_cast<int64_t>(n);
  }
  if (body.contains("seed")) so.seed = unsigned_field(body, "seed");
  return so;
}


// A POST /chat/completions body as a job for the model thread. The messages follow the rules of the
// JSONL files (data::parse_conversation): roles system?, user, assistant, user, ..., no empty
// content, and here the last one must be the user's. Throws nanoddp::Error (400 for the client).
std::shared_ptr<ServeJob> parse_request(const std::string& body, const ServeArgs& defaults, const data::Tokenizer& tok,
                                        int64_t context) {
  const json j = json::parse(body, nullptr, false);
  NANODDP_CHECK(!j.is_discarded(), "the request body is not JSON");
  NANODDP_CHECK(j.is_object() && j.contains("messages"), "the request body must be a JSON object with \"messages\": "
                "[{{\"role\": \"user\", \"content\": \"...\"}}, ...]");
  // A misspelt field would otherwise be ignored without a word, and the reply sampled differently.
  for (const auto& [key, value] : j.items())
    NANODDP_CHECK(key == "messages" || key == "temperature" || key == "top_k" || key == "max_tokens" || key == "seed",
                  "unknown field \"{}\" (the fields are messages, temperature, top_k, max_tokens, seed)", key);
  auto job = std::make_shared<ServeJob>();
  job->options = sampling(j, defaults, context);
  data::Conversation conv = data::parse_conversation(body, "the request");
  job->prompt = chat::fit_to_context(tok, conv, job->options.max_tokens, context, job->dropped_messages);
  chat::set_reply_stop(job->options, tok);
  return job;
}

// Whether `req` declares a form-encoded body of at most `max` bytes (so a 413 is cpp-httplib's own
// limit on such bodies, not --max_request_bytes).
bool form_encoded_within(const httplib::Request& req, int64_t max) {
  if (!req.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded")) return false;
  const std::string length = req.get_header_value("Content-Length");
  char* end = nullptr;
  const long long n = std::strtoll(length.c_str(), &end, 10);
  return !length.empty() && *end == '\0' && n >= 0 && n <= max;
}

// The routes, and JSON bodies for the errors cpp-httplib answers itself (404, 413, 400 for broken HTTP).
// Requests without a Content-Length body, or over --max_request_bytes, never get here: the front
// refuses them (serve_request_frame.h).
void add_routes(httplib::Server& server, const ServeArgs& a, JobQueue& queue, const data::Tokenizer& tok,
                int64_t context) {
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kServePage, "text/html; charset=utf-8");
  });
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(to_json({{"status", "ok"}}), "application/json");
  });
  server.Post("/chat/completions", [&a, &queue, &tok, context](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<ServeJob> job;
    try {
      job = parse_request(req.body, a, tok, context);
    } catch (const Error& e) {
      return reply_error(res, 400, e.what());
    }
    if (!queue.submit(job)) {
      if (queue.stopping()) return reply_error(res, 503, "the server is stopping");
      res.set_header("Retry-After", "1");
      return reply_error(res, 503, fmt::format("busy: {} requests already wait for the model (--max_queue); try "
                                               "again later", queue.max_waiting()));
    }
    res.set_header("Cache-Control", "no-cache");
    // Runs on this worker after the headers are sent; waits for the model thread's events. While
    // none come (the job waits its turn) an SSE comment goes out every second, which clients ignore:
    // writing is the only way to find that a client has left, and a client that left must give up
    // its place in the queue at once, not when its turn comes. The releaser runs when the response
    // goes away, sent or not: a job whose client is gone is withdrawn or, running, stopped.
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, &queue](size_t, httplib::DataSink& sink) {
          static const std::string kStillWaiting = ": waiting\n\n";
          while (auto events = job->take(std::chrono::seconds(1))) {
            const std::string& out = events->empty() ? kStillWaiting : *events;
            if (!sink.write(out.data(), out.size())) {
              job->cancel();
              queue.withdraw(job);
              return false;
            }
          }
          sink.done();
          return true;
        },
        [job, &queue](bool) {
          job->cancel();
          queue.withdraw(job);
        });
  });
  using HandlerResponse = httplib::Server::HandlerResponse;
  server.set_error_handler(httplib::Server::HandlerWithResponse([max = a.max_request_bytes](
                                                                    const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return HandlerResponse::Unhandled;  // a route's own error
    if (res.status == 404)
      reply_error(res, 404, fmt::format("no route {} {} (GET /, GET /health, POST /chat/completions)", req.method,
                                        req.path));
    else if (res.status == 413 && form_encoded_within(req, max))
      // cpp-httplib refuses form-encoded bodies over its own 8 KiB (curl -d's default type).
      reply_error(res, 413, "form-encoded request bodies are limited to 8192 bytes: send the JSON with Content-Type: "
                            "application/json (curl -H 'Content-Type: application/json')");
    else
      reply_error(res, res.status, fmt::format("HTTP {} for {} {}", res.status, req.method, req.path));
    return HandlerResponse::Handled;
  }));
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      reply_error(res, 500, fmt::format("internal error: {}", e.what()));
    } catch (...) {
      reply_error(res, 500, "internal error");
    }
  });
}

// SIGINT and SIGTERM stop the server. They are blocked before any other thread starts (threads
// inherit the mask: HTTP workers, OpenMP's team, the CUDA runtime's), and this thread takes them
// with sigwait, so stopping runs as ordinary code rather than in a signal handler. A second signal
// while stopping exits at once.
class SignalWatcher {
 public:
  explicit SignalWatcher(std::function<void(int)> on_signal) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this, on_signal = std::move(on_signal)] {
      for (int received = 0;; received++) {
        int sig = 0;
        sigwait(&set_, &sig);
        if (quitting_) return;
        if (received > 0) {
          std::fprintf(stderr, "nanoddp serve: second signal, exiting now\n");
          std::_Exit(128 + sig);
        }
        on_signal(sig);
      }
    });
  }
  // The mask stays as it is: the process is ending.
  ~SignalWatcher() {
    quitting_ = true;
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait
    thread_.join();
  }
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  sigset_t set_;
  std::atomic<bool> quitting_{false};
  std::thread thread_;
};

void serve(const ServeArgs& a) {
  check_serve_flags(a);
  JobQueue queue(static_cast<size_t>(a.max_queue));
  SignalWatcher signals([&queue](int sig) {
    fmt::print("nanoddp serve: {}, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::fflush(stdout);
    queue.stop(sse_event({{"error", "the server is stopping"}}));
  });
  const std::string dir = resolve_checkpoint_flag("--checkpoint", a.checkpoint);
  auto model = train::load_model(dir, single_process_device(a.device), a.dtype);
  auto tok = train::load_checkpoint_tokenizer(dir, a.data);
  const int64_t context = model->config().max_seq_len;
  NANODDP_CHECK(a.max_tokens <= context, "--max_tokens {} is more than the model's context of {} tokens: give "
                "--max_tokens {} or less", a.max_tokens, context, context);
  // A tokenizer without nanochat's special tokens (gpt2) fails here, naming the missing token.
  data::render_for_completion(*tok, data::parse_conversation(R"([{"role": "user", "content": "hi"}])", "the tokenizer check"));
  if (queue.stopping()) return;  // a signal came while loading

  ServeFront::Limits limits;
  limits.max_connections = static_cast<size_t>(a.max_connections);
  // A worker per waiting request, plus some for the running one, /health and refusals: a worker
  // holds a request only while it is answered, never while it is read.
  limits.workers = static_cast<size_t>(a.max_queue) + 8;
  limits.max_body = static_cast<uint64_t>(a.max_request_bytes);
  ServeFront server(limits);
  add_routes(server, a, queue, *tok, context);
  server.set_payload_max_length(static_cast<size_t>(a.max_request_bytes));
  const int port = server.bind(a.host, a.port);
  if (!is_loopback(a.host))
    fmt::print(stderr, "nanoddp serve: warning: listening on {}, not loopback: the API has no authentication, so "
               "anyone who can reach this port can use the model\n", a.host);
  const std::string url = fmt::format("http://{}:{}", a.host.find(':') != std::string::npos ? "[" + a.host + "]"
                                                                                              : a.host, port);
  fmt::print("nanoddp serve: {} (context {} tokens), Ctrl-C stops\nserving on {}\n", dir, context, url);
  std::fflush(stdout);

  std::thread http([&] {
    server.run();
    queue.stop(sse_event({{"error", "the server stopped"}}));
  });
  serve_jobs(queue, *model, *tok);
  server.stop();  // also when a signal came before run() started
  http.join();
  fmt::print("nanoddp serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("serve", "Chat with a checkpoint in the browser or over HTTP (nanochat's chat_web)");
  auto args = std::make_shared<ServeArgs>();
  add_option_flags(*cmd, *args);
  cmd->callback([args] { serve(*args); });
}

}  // namespace nanoddp::cli
