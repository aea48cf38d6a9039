// nanoddp serve as clients use it: the binary on a free port (--port 0) with a tiny checkpoint,
// driven with cpp-httplib's client.
//  - (the job queue on its own is tests/chat/test_serve_model.cpp);
//  - /health, the page, and a JSON error with the right status for each bad request;
//  - a streamed reply: token events, then a done event whose count is the tokens generated; at
//    temperature 0 its text is `nanoddp chat --prompt`'s and the in-process model::generate's;
//  - a conversation beyond the context loses its oldest turns (a system message stays);
//  - concurrent clients (and one that hangs up) all get complete replies or a clean 503;
//  - the front: where a request ends and what is refused before a worker sees it (411, 400, 413,
//    431); /health answered while 200 clients hold half-sent requests; 408 for a request that
//    trickles in; 503 beyond --max_connections; pipelined requests answered in order;
//  - a port in use, a missing checkpoint and bad flags exit 1 with one clear line; SIGINT and
//    SIGTERM stop the server with exit 0.
// The page in a real browser is tests/cli/serve_browser.py.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli/serve_request_frame.h"
#include "corpus.h"
#include "data/conversation.h"
#include "model/generate.h"
#include "subprocess.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/model_io.h"

namespace nanoddp {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::Proc;
using testing::ScratchDir;

constexpr int64_t kContext = 32;   // --max_seq_len of the test model
constexpr int kMaxTokens = 8;      // the server's --max_tokens

// A scratch directory named after the running test: ctest runs each test case as its own process.
std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// A base checkpoint of a tiny model on the byte tokenizer, which has nanochat's special tokens, so
// it can chat (badly: it never saw a conversation, which does not matter here).
std::string make_checkpoint(const ScratchDir& dir) {
  testing::make_byte_dataset(dir.str(), 100, 3);  // into DIR/data
  Proc train({testing::nanoddp_binary(), "train", "--data", dir.str("data"), "--out", dir.str("out"), "--depth", "2",
              "--aspect_ratio", "32", "--head_dim", "32", "--max_seq_len", std::to_string(kContext),
              "--device_batch_size", "4", "--total_batch_size", "128", "--num_iterations", "4", "--eval_every", "4",
              "--eval_tokens", "512", "--threads", "1", "--peak_flops", "1e9"});
  EXPECT_EQ(train.wait_exit(60s), 0) << train.all();
  return dir.str("out");
}

// `nanoddp serve --port 0` and the port it printed.
struct Server {
  explicit Server(const std::string& checkpoint, std::vector<std::string> extra = {})
      : proc(argv(checkpoint, std::move(extra))) {
    const std::regex line(R"(serving on http://127\.0\.0\.1:(\d+))");
    EXPECT_TRUE(proc.wait_for([&](const std::string& s) {
      return std::regex_search(s, line) || s.find("nanoddp: error:") != std::string::npos;
    }, 30s)) << proc.all();
    std::smatch m;
    const std::string out = proc.out();
    if (std::regex_search(out, m, line)) port = std::stoi(m[1]);
  }
  static std::vector<std::string> argv(const std::string& checkpoint, std::vector<std::string> extra) {
    std::vector<std::string> a = {testing::nanoddp_binary(), "serve", "--checkpoint", checkpoint, "--port", "0",
                                  "--max_tokens", std::to_string(kMaxTokens)};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    return c;
  }
  Proc proc;
  int port = 0;
};

// A completion request's body: one user message and optional fields.
std::string request(const std::string& message, json fields = json::object()) {
  fields["messages"] = json::array({{{"role", "user"}, {"content", message}}});
  return fields.dump();
}

// The events of an event-stream body.
struct Reply {
  std::string text;
  int token_events = 0;
  bool done = false;
  int64_t tokens = -1, dropped = -1;
  std::string finish;  // why the reply ended: stop, length or context
  std::string error;
};
Reply parse_events(const std::string& body) {
  Reply r;
  size_t pos = 0;
  for (size_t end; (end = body.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
    const std::string event = body.substr(pos, end - pos);
    if (event.starts_with(":")) continue;  // an SSE comment: sent while the request waits its turn
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    const json j = json::parse(event.substr(6));
    EXPECT_FALSE(r.done) << "an event after done: " << event;
    if (j.contains("token")) {
      r.text += j["token"].get<std::string>();
      r.token_events++;
    } else if (j.contains("done")) {
      r.done = true;
      r.tokens = j["tokens"];
      r.dropped = j["dropped_messages"];
      r.finish = j["finish"];
    } else {
      r.error = j.value("error", event);
    }
  }
  EXPECT_EQ(pos, body.size()) << "the stream ends inside an event";
  return r;
}

Reply complete(httplib::Client& c, const std::string& body) {
  auto res = c.Post("/chat/completions", body, "application/json");
  EXPECT_TRUE(res) << "no response: " << httplib::to_string(res.error());
  if (!res) return {};
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  return parse_events(res->body);
}

// A request answered with `status` and {"error": ...} containing `needle`.
void expect_error(httplib::Client& c, const std::string& body, int status, const std::string& needle) {
  auto res = c.Post("/chat/completions", body, "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, status) << body << " -> " << res->body;
  const json j = json::parse(res->body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << res->body;
  EXPECT_NE(j["error"].get<std::string>().find(needle), std::string::npos) << res->body;
}

TEST(Serve, HealthPageAndErrors) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir), {"--max_request_bytes", "2048"});
  ASSERT_GT(s.port, 0);
  auto c = s.client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body), json({{"status", "ok"}}));
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  for (const char* id : {"id=\"message\"", "id=\"send\"", "/chat/completions"})
    EXPECT_NE(page->body.find(id), std::string::npos) << id;
  // Self-contained: nothing loaded from elsewhere.
  EXPECT_EQ(page->body.find("http://"), std::string::npos);
  EXPECT_EQ(page->body.find("https://"), std::string::npos);

  auto missing = c.Get("/v1/models");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(json::parse(missing->body)["error"].get<std::string>().find("/v1/models"), std::string::npos);

  expect_error(c, "{\"messages\": [", 400, "not JSON");
  expect_error(c, R"({"messages": [{"role": "bot", "content": "hi"}]})", 400, "unknown role 'bot'");
  expect_error(c, R"({"messages": []})", 400, "non-empty list");
  expect_error(c, R"({"messages": [{"role": "user", "content": ""}]})", 400, "empty content");
  expect_error(c, R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})", 400,
               "must end with a user turn");
  expect_error(c, request("hi", {{"temperature", -0.5}}), 400, "\"temperature\" must be a number >= 0");
  expect_error(c, request("hi", {{"temperature", "hot"}}), 400, "\"temperature\"");
  expect_error(c, request("hi", {{"top_k", -1}}), 400, "\"top_k\" must be an integer >= 0");
  expect_error(c, request("hi", {{"max_tokens", 0}}), 400, "\"max_tokens\" must be 1 to 32");
  expect_error(c, request("hi", {{"max_tokens", kContext + 1}}), 400, "\"max_tokens\" must be 1 to 32");
  expect_error(c, request("hi", {{"temprature", 1}}), 400, "unknown field \"temprature\"");
  // A last message that cannot fit the context of 32 tokens.
  expect_error(c, request(std::string(40, 'x')), 400, "longer than the model's context of 32");
  // Over --max_request_bytes: refused before it is parsed.
  expect_error(c, request(std::string(3000, 'x')), 413, "larger than 2048 bytes");
  // The server is still fine.
  EXPECT_TRUE(complete(c, request("hi")).done);
}

// cpp-httplib refuses form-encoded bodies (curl -d's default type) over its own 8 KiB: the 413 says
// to send JSON, not that --max_request_bytes (64 KiB) was passed. A JSON body of that size is read.
TEST(Serve, AFormEncodedBodyOverEightKiBIsToldToSendJson) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir), {});
  ASSERT_GT(s.port, 0);
  auto c = s.client();
  const std::string body = request(std::string(9000, 'x'));
  auto form = c.Post("/chat/completions", body, "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 413);
  EXPECT_NE(json::parse(form->body)["error"].get<std::string>().find("Content-Type: application/json"),
            std::string::npos) << form->body;
  expect_error(c, body, 400, "longer than the model's context");
}

// The reference reply: the checkpoint loaded here and model::generate, as serve and chat do.
std::vector<int32_t> reference_reply(const std::string& checkpoint, const std::string& message, int max_tokens) {
  const std::string dir = train::resolve_checkpoint(checkpoint);
  auto model = train::load_model(dir, parse_device("cpu"));
  auto tok = train::load_checkpoint_tokenizer(dir);
  const auto conv = data::parse_conversation(request(message), "the reference");
  model::SampleOptions so;
  so.max_tokens = max_tokens;
  so.temperature = 0;
  so.stop_token = tok->special_id("<|assistant_end|>");
  auto ids = model::generate(*model, data::render_for_completion(*tok, conv), so);
  if (!ids.empty() && ids.back() == so.stop_token) ids.pop_back();
  return ids;
}

// Text as a JSON string carries it: a tiny model's reply may hold bytes that are not UTF-8 (its byte
// tokens), and the server sends each such byte as U+FFFD (chat/serve_model.h); chat prints them as they are.
std::string as_json_text(const std::string& bytes) {
  return json::parse(json(bytes).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

TEST(Serve, StreamsTheReplyThatChatAndGenerateGive) {
  ScratchDir dir("serve_" + test_name());
  const std::string ckpt = make_checkpoint(dir);
  Server s(ckpt);
  ASSERT_GT(s.port, 0);
  auto c = s.client();
  const Reply r = complete(c, request("hi", {{"temperature", 0}}));
  ASSERT_TRUE(r.done) << r.error;
  EXPECT_GE(r.token_events, 1);
  EXPECT_GE(r.tokens, r.token_events);
  EXPECT_LE(r.tokens, kMaxTokens);
  EXPECT_EQ(r.dropped, 0);

  const auto ids = reference_reply(ckpt, "hi", kMaxTokens);
  EXPECT_EQ(r.tokens, static_cast<int64_t>(ids.size()));
  const auto tok = train::load_checkpoint_tokenizer(train::resolve_checkpoint(ckpt));
  const std::string text = tok->decode(ids);
  EXPECT_EQ(r.text, as_json_text(text));

  // nanoddp chat --prompt prints the reply's bytes as they are, and a newline.
  Proc chat({testing::nanoddp_binary(), "chat", "--checkpoint", ckpt, "--prompt", "hi", "--temperature", "0",
             "--max_tokens", std::to_string(kMaxTokens)});
  ASSERT_EQ(chat.wait_exit(60s), 0) << chat.all();
  EXPECT_EQ(chat.out(), text + "\n");

  // Sampling is reproducible: the same messages and seed give the same reply.
  const Reply a = complete(c, request("hi", {{"temperature", 1.0}, {"seed", 7}, {"top_k", 0}}));
  const Reply b = complete(c, request("hi", {{"temperature", 1.0}, {"seed", 7}, {"top_k", 0}}));
  ASSERT_TRUE(a.done && b.done);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.tokens, b.tokens);
  // max_tokens is obeyed, and the done event says why the reply ended.
  const Reply one = complete(c, request("hi", {{"max_tokens", 1}}));
  ASSERT_TRUE(one.done);
  EXPECT_LE(one.tokens, 1);
  EXPECT_TRUE(one.finish == "length" || (one.finish == "stop" && one.tokens == 0)) << one.finish;
  EXPECT_TRUE(r.finish == "stop" || (r.finish == "length" && r.tokens == kMaxTokens)) << r.finish;
  // A reply the context cuts short says so (was: a done event like any other). This barely
  // trained model never ends a greedy reply to "hi" by itself; chat says the same on stderr.
  const Reply full = complete(c, request("hi", {{"temperature", 0}, {"max_tokens", kContext}}));
  ASSERT_TRUE(full.done) << full.error;
  EXPECT_EQ(full.finish, "context");
  EXPECT_LT(full.tokens, kContext);
  Proc cut({testing::nanoddp_binary(), "chat", "--checkpoint", ckpt, "--prompt", "hi", "--temperature", "0",
            "--max_tokens", std::to_string(kContext)});
  ASSERT_EQ(cut.wait_exit(60s), 0) << cut.all();
  EXPECT_EQ(as_json_text(cut.out()), full.text + "\n");
  EXPECT_NE(cut.err().find("the reply stopped after " + std::to_string(full.tokens) +
                           " tokens: the conversation fills the model's context of 32 tokens"),
            std::string::npos)
      << cut.err();
}

TEST(Serve, LongConversationsLoseTheirOldestTurns) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir));
  ASSERT_GT(s.port, 0);
  auto c = s.client();
  // 1 + (1 + 10 + 1) + (1 + 10 + 1) + (1 + 2 + 1) + 1 = 30 tokens of prompt: with 8 to reply, the
  // first two turns go.
  auto message = [](const std::string& role, const std::string& content) {
    json m = json::object();
    m["role"] = role;
    m["content"] = content;
    return m;
  };
  json turns = json::array({message("user", std::string(10, 'a')), message("assistant", std::string(10, 'b')),
                            message("user", "hi")});
  Reply r = complete(c, json({{"messages", turns}}).dump());
  ASSERT_TRUE(r.done) << r.error;
  EXPECT_EQ(r.dropped, 2);
  // A system message stays (merged into the user message that is left).
  turns.insert(turns.begin(), message("system", "be kind"));
  r = complete(c, json({{"messages", turns}}).dump());
  ASSERT_TRUE(r.done) << r.error;
  EXPECT_EQ(r.dropped, 2);
  // Short enough: nothing dropped.
  r = complete(c, json({{"messages", json::array({turns[0], turns[3]})}}).dump());
  ASSERT_TRUE(r.done) << r.error;
  EXPECT_EQ(r.dropped, 0);
}

// A socket connected to the server on loopback that sends `what` (-1 when either fails). Reads on
// it give up after 30 s (more than the server's 10 s for a request).
int connect_and_send(int port, const std::string& what) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::send(fd, what.data(), what.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(what.size()))
    return fd;
  ::close(fd);
  return -1;
}

// Connects, sends half a request or a whole one, and hangs up without reading.
void hang_up(int port, const std::string& what) {
  const int fd = connect_and_send(port, what);
  ASSERT_GE(fd, 0);
  ::close(fd);
}

// What the server sends on `fd` until it closes the connection, or until `enough` says so, or 30 s
// pass without a byte.
std::string read_reply(int fd, const std::function<bool(const std::string&)>& enough) {
  std::string got;
  char buf[4096];
  for (ssize_t n; !enough(got) && (n = ::read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  return got;
}

// Sends `what` and returns the response's status line ("" if none came within 30 s).
std::string status_line(int port, const std::string& what) {
  const int fd = connect_and_send(port, what);
  if (fd < 0) return "";
  const std::string got = read_reply(fd, [](const std::string& s) { return s.find("\r\n") != std::string::npos; });
  ::close(fd);
  return got.substr(0, got.find("\r\n"));
}

// Sends `what` and returns the whole response, read until the server closes the connection.
std::string whole_reply(int port, const std::string& what) {
  const int fd = connect_and_send(port, what);
  if (fd < 0) return "";
  const std::string got = read_reply(fd, [](const std::string&) { return false; });
  ::close(fd);
  return got;
}

// A chunked body is refused before it is read, whatever its length (cpp-httplib's limit counts
// Content-Length bodies only: was read to the end, 1 GB as well as 1 KB), and whatever the case of
// "chunked", which cpp-httplib compares without case. The requests below send their headers and no
// body at all: a server that read the body first would not answer until its read timed out.
TEST(Serve, ChunkedBodiesAreRefusedBeforeTheyAreRead) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir), {"--max_request_bytes", "2048"});
  ASSERT_GT(s.port, 0);
  for (const char* te : {"chunked", "Chunked", "CHUNKED"}) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(status_line(s.port, std::string("POST /chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                              "application/json\r\nTransfer-Encoding: ") + te + "\r\n\r\n"),
              "HTTP/1.1 411 Length Required")
        << te;
    // cpp-httplib's read timeout is 5 s: an answer well before it came without waiting for a body.
    EXPECT_LT(std::chrono::steady_clock::now() - start, 4s) << te;
  }
  auto c = s.client();
  EXPECT_TRUE(complete(c, request("hi")).done);
}

// The front's framing (cli/serve_request_frame.h): where a request ends, and what is refused before
// any worker sees it.
TEST(ServeFrame, RequestsEndAfterTheirContentLengthAndUnframeableOnesAreRefused) {
  using State = cli::RequestFrame::State;
  constexpr uint64_t kBody = 100;
  constexpr size_t kHead = 200;
  auto frame = [](const std::string& bytes) { return cli::frame_request(bytes, kBody, kHead); };
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(frame(get).state, State::Complete);
  EXPECT_EQ(frame(get).size, get.size());
  EXPECT_EQ(frame(get.substr(0, get.size() - 1)).state, State::Incomplete);
  // Pipelined: the first request is exactly its own bytes; the second follows.
  const std::string post = "POST /chat/completions HTTP/1.1\r\ncontent-length:  5 \r\n\r\nhello";
  EXPECT_EQ(frame(post + get).size, post.size());
  EXPECT_EQ(frame(post.substr(0, post.size() - 2)).state, State::Incomplete);
  // "Expect: 100-continue" is noted while the body is still to come.
  const auto waiting = frame("POST / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-Continue\r\n\r\nhe");
  EXPECT_EQ(waiting.state, State::Incomplete);
  EXPECT_TRUE(waiting.expect_continue);
  auto refused = [&](const std::string& bytes, int status, const std::string& needle) {
    const auto f = frame(bytes);
    EXPECT_EQ(f.state, State::Refused) << bytes;
    EXPECT_EQ(f.status, status) << bytes;
    EXPECT_NE(f.message.find(needle), std::string::npos) << f.message;
  };
  // No body length (was: read until the client closed or 5 s passed, then a bare 400).
  refused("POST /chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 411, "a POST needs a Content-Length header");
  refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411, "Transfer-Encoding (chunked)");
  // Not a length (was: -5 read as 2^64 - 5, and 413 "larger than 65536 bytes").
  refused("POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400, "Content-Length must be a whole number of bytes "
          "(got '-5')");
  refused("POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 400, "(got '1e3')");
  refused("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400, "(got '')");
  refused("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400, "two different");
  // Too long: refused before the body is read; a length past 2^64 is too long, not malformed.
  refused("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413, "larger than 100 bytes");
  refused("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413, "larger than 100 bytes");
  EXPECT_EQ(frame("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n").state, State::Incomplete);
  // A head that never ends, or ends past the limit.
  refused("GET /" + std::string(kHead, 'a'), 431, "larger than 200 bytes");
  refused("GET / HTTP/1.1\r\nX: " + std::string(kHead, 'a') + "\r\n\r\n", 431, "larger than 200 bytes");
  EXPECT_EQ(frame("GET /" + std::string(kHead - 5, 'a')).state, State::Incomplete);
}

// 200 clients that each send half a request and wait hold no worker: /health is answered while
// they all still wait. Was: the 24 workers sat in 5 s read timeouts, and /health came after 14-49 s.
TEST(Serve, HealthIsAnsweredWhile200ClientsHoldHalfSentRequests) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir));
  ASSERT_GT(s.port, 0);
  std::vector<int> slow;
  for (int i = 0; i < 200; i++) {
    const std::string half = i % 2 ? "POST /chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"mess"
                                   : "GET /health HTTP/1.1\r\nHo";
    slow.push_back(connect_and_send(s.port, half));
    ASSERT_GE(slow.back(), 0) << i;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string health = whole_reply(s.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(health.substr(0, health.find("\r\n")), "HTTP/1.1 200 OK") << health;
  EXPECT_NE(health.find(R"({"status":"ok"})"), std::string::npos) << health;
  // The requirement: within a second. One /health costs well under a millisecond; the old server
  // could not answer before a 5 s read timeout freed a worker, so 1 s leaves a wide margin both ways.
  EXPECT_LT(took, 1s);
  // And what makes it hold at any speed: none of the 200 was answered or dropped to free a worker.
  int still_waiting = 0;
  for (int fd : slow) {
    char byte;
    still_waiting += ::recv(fd, &byte, 1, MSG_DONTWAIT) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK);
    ::close(fd);
  }
  EXPECT_EQ(still_waiting, 200) << "waiting clients were answered or closed before /health was";
}

// A request sent a byte at a time is cut off 10 s after its first byte, whatever its pace. Was:
// cpp-httplib's 5 s read timeout started again with each byte, so such a client held a worker for
// as long as it liked.
TEST(Serve, ARequestTrickledAByteAtATimeIsCutOffWith408) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir));
  ASSERT_GT(s.port, 0);
  const int fd = connect_and_send(s.port, "GET /health HTTP/1.1\r\nX: ");
  ASSERT_GE(fd, 0);
  // A byte every half second, at most 60 (30 s), until the server answers.
  int sent = 0;
  char byte;
  for (; sent < 60 && ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0; sent++) {
    ::send(fd, "a", 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(500ms);
  }
  const std::string got = read_reply(fd, [](const std::string& r) { return r.find("\r\n") != std::string::npos; });
  ::close(fd);
  EXPECT_EQ(got.substr(0, got.find("\r\n")), "HTTP/1.1 408 Request Timeout") << got;
  EXPECT_LT(sent, 60) << "never cut off";
}

TEST(Serve, ConnectionsBeyondTheCapAreAnswered503) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir), {"--max_connections", "3"});
  ASSERT_GT(s.port, 0);
  std::vector<int> held;
  for (int i = 0; i < 3; i++) held.push_back(connect_and_send(s.port, "GET /health HTTP/1.1\r\n"));
  const std::string refused = whole_reply(s.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(refused.substr(0, refused.find("\r\n")), "HTTP/1.1 503 Service Unavailable") << refused;
  EXPECT_NE(refused.find("--max_connections"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  for (int fd : held) ::close(fd);
  // The places come free once the server sees the three go: polled for, at most 50 tries.
  std::string again;
  for (int i = 0; i < 50 && !again.starts_with("HTTP/1.1 200"); i++) {
    if (i > 0) std::this_thread::sleep_for(100ms);
    again = status_line(s.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  EXPECT_EQ(again, "HTTP/1.1 200 OK");
}

// Requests sent back to back on one connection, before any answer, are all answered, in order.
// Was: only the first; cpp-httplib read the next through a fresh buffer, and the bytes already
// read were lost.
TEST(Serve, PipelinedRequestsAreAnsweredInOrder) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir));
  ASSERT_GT(s.port, 0);
  const std::string bad = R"({"messages": []})";
  const std::string reply = whole_reply(s.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                                        "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
                                        "POST /chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                        "Content-Length: " + std::to_string(bad.size()) + "\r\n\r\n" + bad +
                                        "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::vector<std::string> statuses;
  for (size_t pos = 0; (pos = reply.find("HTTP/1.1 ", pos)) != std::string::npos; pos++)
    statuses.push_back(reply.substr(pos, reply.find("\r\n", pos) - pos));
  EXPECT_EQ(statuses, (std::vector<std::string>{"HTTP/1.1 200 OK", "HTTP/1.1 404 Not Found",
                                                "HTTP/1.1 400 Bad Request", "HTTP/1.1 200 OK"}))
      << reply;
  EXPECT_LT(reply.find("/nowhere"), reply.find("non-empty list")) << reply;
}

// Bodies whose length the server cannot know, or that is not a length, are refused at once with the
// status that says so. Was: 400 after a 5 s read timeout, and 413 "larger than 65536 bytes" for -5.
TEST(Serve, AMissingContentLengthIs411AndANegativeOneIs400) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir));
  ASSERT_GT(s.port, 0);
  const std::string missing = whole_reply(s.port, "POST /chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                          "application/json\r\n\r\n");
  EXPECT_EQ(missing.substr(0, missing.find("\r\n")), "HTTP/1.1 411 Length Required") << missing;
  EXPECT_NE(missing.find("needs a Content-Length header"), std::string::npos) << missing;
  const std::string negative = whole_reply(s.port, "POST /chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                                           "-5\r\n\r\n{}");
  EXPECT_EQ(negative.substr(0, negative.find("\r\n")), "HTTP/1.1 400 Bad Request") << negative;
  EXPECT_NE(negative.find("Content-Length must be a whole number of bytes (got '-5')"), std::string::npos)
      << negative;
  auto c = s.client();
  EXPECT_TRUE(complete(c, request("hi")).done);
}

TEST(Serve, ConcurrentClientsAllGetCompleteReplies) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir));
  ASSERT_GT(s.port, 0);
  const std::string body = request("hello there");
  std::vector<Reply> replies(4);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < replies.size(); i++)
    clients.emplace_back([&, i] {
      auto c = s.client();
      replies[i] = complete(c, body);
    });
  // Clients that leave: mid-request, and right after a whole one.
  hang_up(s.port, "POST /chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"mess");
  hang_up(s.port, "POST /chat/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  for (auto& t : clients) t.join();
  for (const Reply& r : replies) {
    EXPECT_TRUE(r.done) << r.error;
    EXPECT_GE(r.token_events, 1);
    EXPECT_EQ(r.text, replies[0].text) << "same messages, same seed";
  }
  auto c = s.client();
  EXPECT_TRUE(complete(c, body).done);
}

TEST(Serve, AFullQueueAnswers503AndEveryOtherRequestCompletes) {
  ScratchDir dir("serve_" + test_name());
  Server s(make_checkpoint(dir), {"--max_queue", "1"});
  ASSERT_GT(s.port, 0);
  // 8 at once for 1 running and 1 waiting: how many are refused depends on timing; each must be a
  // whole reply or a clean 503 with a JSON error, and the server must go on.
  std::vector<int> status(8, 0);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < status.size(); i++)
    clients.emplace_back([&, i] {
      auto c = s.client();
      auto res = c.Post("/chat/completions", request("hi"), "application/json");
      if (!res) return;
      status[i] = res->status;
      if (res->status == 200) {
        EXPECT_TRUE(parse_events(res->body).done);
      } else {
        EXPECT_EQ(res->status, 503);
        EXPECT_NE(res->body.find("--max_queue"), std::string::npos) << res->body;
      }
    });
  for (auto& t : clients) t.join();
  for (int st : status) EXPECT_TRUE(st == 200 || st == 503) << st;
  auto c = s.client();
  EXPECT_TRUE(complete(c, request("hi")).done);
}

TEST(Serve, PortInUseMissingCheckpointAndBadFlagsExit1) {
  ScratchDir dir("serve_" + test_name());
  const std::string ckpt = make_checkpoint(dir);
  Server s(ckpt);
  ASSERT_GT(s.port, 0);
  auto run = [](std::vector<std::string> args) {
    args.insert(args.begin(), testing::nanoddp_binary());
    auto p = std::make_unique<Proc>(args);
    EXPECT_EQ(p->wait_exit(30s), 1) << p->all();
    return p->err();
  };
  std::string err = run({"serve", "--checkpoint", ckpt, "--max_tokens", "8", "--port", std::to_string(s.port)});
  EXPECT_NE(err.find("cannot listen on 127.0.0.1:" + std::to_string(s.port)), std::string::npos) << err;
  EXPECT_NE(err.find("Address already in use"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
  err = run({"serve", "--checkpoint", dir.str("nowhere"), "--port", "0"});
  EXPECT_NE(err.find("--checkpoint " + dir.str("nowhere") + " does not exist"), std::string::npos) << err;
  err = run({"serve", "--checkpoint", ckpt, "--port", "0"});  // --max_tokens 256 > 32
  EXPECT_NE(err.find("--max_tokens 256 is more than the model's context of 32"), std::string::npos) << err;
  err = run({"serve", "--checkpoint", ckpt, "--port", "0", "--max_queue", "0"});
  EXPECT_NE(err.find("--max_queue must be 1 to 1024"), std::string::npos) << err;
  err = run({"serve", "--checkpoint", ckpt, "--port", "0", "--max_tokens", "8", "--max_connections", "513"});
  EXPECT_NE(err.find("--max_connections must be 1 to 512 (got 513)"), std::string::npos) << err;
  err = run({"serve", "--checkpoint", ckpt, "--port", "70000"});
  EXPECT_NE(err.find("--port must be 0"), std::string::npos) << err;
  // The first server did not notice.
  auto c = s.client();
  EXPECT_TRUE(complete(c, request("hi")).done);
}

TEST(Serve, SigintAndSigtermStopItWithExit0) {
  ScratchDir dir("serve_" + test_name());
  const std::string ckpt = make_checkpoint(dir);
  for (int sig : {SIGINT, SIGTERM}) {
    Server s(ckpt);
    ASSERT_GT(s.port, 0);
    auto c = s.client();
    EXPECT_TRUE(complete(c, request("hi")).done);  // leaves a keep-alive connection open
    ::kill(s.proc.pid(), sig);
    EXPECT_EQ(s.proc.wait_exit(20s), 0) << s.proc.all();
    EXPECT_NE(s.proc.out().find("nanoddp serve: stopped"), std::string::npos) << s.proc.all();
  }
}

TEST(Serve, NonLoopbackHostIsWarnedAbout) {
  ScratchDir dir("serve_" + test_name());
  Proc p({testing::nanoddp_binary(), "serve", "--checkpoint", make_checkpoint(dir), "--max_tokens", "8", "--port", "0",
          "--host", "0.0.0.0"});
  EXPECT_TRUE(p.wait_for_text("serving on http://0.0.0.0:", 30s)) << p.all();
  // Waited for, not read at once: the warning goes to stderr, the address to stdout, and the
  // reader thread may take the two pipes in either order.
  EXPECT_TRUE(p.wait_for_text("warning: listening on 0.0.0.0, not loopback: the API has no authentication", 10s))
      << p.err();
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait_exit(20s), 0) << p.all();
}

}  // namespace
}  // namespace nanoddp
