// TcpStoreServer: one thread, one poll() loop over the listening socket, a wake-up eventfd and
// every client connection.
//
// Each connection carries one request at a time (the client waits for the reply before sending the
// next). Requests that may block (Get of a missing key, Wait) are parked on the connection with a
// deadline; every change to the data re-checks the parked requests, and the poll timeout is the
// nearest deadline, so a parked request is answered as soon as its keys exist or with Timeout when
// its deadline passes. Nothing a client sends can block the loop.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/tcp_store.h"

namespace nanoddp::dist {

using wire::Op;
using wire::Status;
using Clock = std::chrono::steady_clock;

std::string store_token_from_env() {
  const char* t = std::getenv("NANODDP_STORE_TOKEN");
  return t ? t : "";
}

namespace {

// Compares without an early exit, so response time does not reveal how much of a token matched.
bool same_token(const std::string& a, const std::string& b) {
  uint8_t diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::max(a.size(), b.size()); i++)
    diff |= uint8_t(i < a.size() ? a[i] : 0) ^ uint8_t(i < b.size() ? b[i] : 0);
  return diff == 0;
}

struct Client {
  net::Fd fd;
  bool authenticated = false;
  bool close_after_flush = false;  // an error reply was queued; drop the client once it is sent
  wire::Bytes in;                  // bytes received, not yet parsed into frames
  wire::Bytes out;                 // reply bytes not yet sent
  size_t out_sent = 0;
  // A parked Get or Wait.
  bool parked = false;
  Op parked_op = Op::Get;
  std::vector<std::string> parked_keys;
  // When a parked request is answered with Timeout.
  Clock::time_point deadline;
};

}  // namespace

class TcpStoreServer::Loop {
 public:
  Loop(net::Fd listener, std::string token, std::atomic<int>* client_count)
      : listener_(std::move(listener)), token_(std::move(token)), client_count_(client_count) {
    // The eventfd lets stop(), called from another thread, wake poll().
    wake_ = net::Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    NANODDP_CHECK(wake_.valid(), "cannot create an eventfd for the rendezvous store server");
  }

  void stop() {
    uint64_t one = 1;
    // The result can be ignored: a write fails only when the counter is full, which already wakes poll().
    [[maybe_unused]] ssize_t k = ::write(wake_.get(), &one, sizeof one);
  }

  void run();

 private:
  void accept_clients();
  // Reads what is available; returns false when the client is gone.
  bool read_from(Client& c);
  bool write_to(Client& c);
  void handle_frames(Client& c);
  void handle(Client& c, wire::Reader& r);
  void reply(Client& c, wire::Writer& w) {
    wire::Bytes frame = w.take();
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
  void reply_error(Client& c, const std::string& message, bool close) {
    wire::Writer w;
    w.u8(uint8_t(Status::Error)).str(message);
    reply(c, w);
    c.close_after_flush = c.close_after_flush || close;
  }
  // Answers parked requests whose keys now exist, or whose deadline has passed.
  void serve_parked(Clock::time_point now);
  bool serve_parked_one(Client& c, Clock::time_point now);
  bool all_present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) > 0; });
  }

  net::Fd listener_, wake_;
  std::string token_;
  std::atomic<int>* client_count_;
  std::vector<std::unique_ptr<Client>> clients_;
  // Only the loop thread touches clients_ and data_, so they need no lock.
  std::unordered_map<std::string, wire::Bytes> data_;
};

void TcpStoreServer::Loop::run() {
  std::vector<pollfd> fds;
  for (;;) {
    // Slots: [0] wake-up, [1] listener, [2...] clients in clients_ order.
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    int timeout_ms = -1;
    auto now = Clock::now();
    for (auto& c : clients_) {
      short events = c->out_sent < c->out.size() ? short(POLLIN | POLLOUT) : short(POLLIN);
      fds.push_back({c->fd.get(), events, 0});
      if (c->parked) {
        // +1 ms: duration_cast rounds down, and waking just before a deadline would only poll again.
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c->deadline - now).count() + 1;
        int ms = int(std::clamp<int64_t>(left, 0, 1 << 30));
        timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
      }
    }
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) NANODDP_ASSERT(false, "poll failed in the rendezvous store server: {}", errno);
    if (fds[0].revents != 0) return;  // stop() was called
    if (fds[1].revents & POLLIN) accept_clients();
    // Visit the clients that were polled (accept_clients appends new ones after them).
    size_t polled = fds.size() - 2;
    // Sized after accept_clients(), so the clients it just added are kept too.
    std::vector<bool> alive(clients_.size(), true);
    for (size_t i = 0; i < polled; i++) {
      Client& c = *clients_[i];
      short ev = fds[i + 2].revents;
      if ((ev & (POLLIN | POLLHUP | POLLERR)) && !read_from(c)) alive[i] = false;
      if (alive[i]) handle_frames(c);
    }
    // After every request of this round: a Set from one client may complete another's parked wait.
    serve_parked(Clock::now());
    for (size_t i = 0; i < clients_.size(); i++) {
      if (alive[i] && !write_to(*clients_[i])) alive[i] = false;
    }
    // Drop closed clients.
    size_t kept = 0;
    for (size_t i = 0; i < clients_.size(); i++) {
      if (alive[i]) clients_[kept++] = std::move(clients_[i]);
    }
    clients_.resize(kept);
    // Published for client_count(), which other threads read.
    client_count_->store(int(kept));
  }
}

void TcpStoreServer::Loop::accept_clients() {
  for (;;) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: none left (other errors: the client went away already)
    // Requests and replies are small and latency-bound.
    net::set_nodelay(fd);
    auto c = std::make_unique<Client>();
    c->fd = net::Fd(fd);
    clients_.push_back(std::move(c));
  }
}

bool TcpStoreServer::Loop::read_from(Client& c) {
  // 64 KiB per recv: a large value arrives over several calls. A short read means the socket is
  // drained, which saves the recv() that would only return EAGAIN.
  uint8_t buf[64 << 10];
  for (;;) {
    ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, 0);
    if (k > 0) {
      c.in.insert(c.in.end(), buf, buf + k);
      if (k < ssize_t(sizeof buf)) return true;
    } else if (k == 0) {
      return false;
    } else {
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
  }
}

bool TcpStoreServer::Loop::write_to(Client& c) {
  while (c.out_sent < c.out.size()) {
    ssize_t k = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (k > 0) {
      c.out_sent += size_t(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The socket buffer is full: keep the rest; POLLOUT says when it drains.
      return true;
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  c.out.clear();
  c.out_sent = 0;
  return !c.close_after_flush;
}

void TcpStoreServer::Loop::handle_frames(Client& c) {
  size_t pos = 0;
  // One request at a time: a parked request must be answered before the next is read.
  while (!c.parked && !c.close_after_flush && c.in.size() - pos >= 4) {
    uint32_t len = wire::read_u32_be(c.in.data() + pos);
    // Refused as soon as its length is read: the reply goes out, then the connection closes.
    if (len > wire::kMaxFrameBytes) {
      reply_error(c, fmt::format("request of {} bytes exceeds the store's limit of {} bytes", len,
                                 wire::kMaxFrameBytes), true);
      break;
    }
    // Incomplete: wait for the rest of the frame.
    if (c.in.size() - pos - 4 < len) break;
    wire::Reader r(c.in.data() + pos + 4, len);
    try {
      handle(c, r);
    } catch (const Error& e) {
      // A malformed request gets the message, then the connection is closed.
      reply_error(c, e.what(), true);
    }
    pos += 4 + len;
  }
  c.in.erase(c.in.begin(), c.in.begin() + pos);
}

void TcpStoreServer::Loop::handle(Client& c, wire::Reader& r) {
  Op op = Op(r.u8());
  wire::Writer w;
  if (!c.authenticated) {
    // Before Hello succeeds, fields are read with small limits, so a stranger cannot make the server
    // allocate much; any failure replies and closes.
    std::string magic = op == Op::Hello ? r.str(64) : "";
    if (magic != wire::kMagic) return reply_error(c, "this port is not a nanoddp rendezvous store", true);
    int64_t version = r.i64();
    std::string token = r.str(wire::kMaxKeyBytes);
    if (version != wire::kVersion)
      return reply_error(c, fmt::format("store protocol version {} is not the server's {}: use the same nanoddp "
                                        "build on every node", version, wire::kVersion), true);
    if (!same_token(token, token_))
      return reply_error(c, token.empty() ? "the store requires a token: set NANODDP_STORE_TOKEN to the job's token"
                                          : "wrong token: set NANODDP_STORE_TOKEN to the same value on every node",
                         true);
    c.authenticated = true;
    w.u8(uint8_t(Status::Ok));
    return reply(c, w);
  }
  switch (op) {
    case Op::Set: {
      std::string key = r.str(wire::kMaxKeyBytes);
      data_[key] = r.bytes(wire::kMaxValueBytes);
      w.u8(uint8_t(Status::Ok));
      break;
    }
    case Op::Get:
    case Op::Wait: {
      int64_t n = op == Op::Get ? 1 : r.i64();
      NANODDP_CHECK(n >= 0 && size_t(n) <= wire::kMaxKeysPerRequest, "too many keys in one store request ({})", n);
      c.parked_keys.clear();
      for (int64_t i = 0; i < n; i++) c.parked_keys.push_back(r.str(wire::kMaxKeyBytes));
      // A negative timeout means "answer now".
      int64_t timeout_ms = std::max<int64_t>(r.i64(), 0);
      c.parked_op = op;
      c.parked = true;
      c.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
      return;  // answered by serve_parked
    }
    case Op::Add: {
      std::string key = r.str(wire::kMaxKeyBytes);
      int64_t delta = r.i64(), value = 0;
      auto it = data_.find(key);
      if (it != data_.end()) {
        const char* b = reinterpret_cast<const char*>(it->second.data());
        auto [end, ec] = std::from_chars(b, b + it->second.size(), value);
        // A value error, not a protocol error: the connection stays open.
        if (ec != std::errc() || end != b + it->second.size())
          return reply_error(c, fmt::format("store key '{}' holds a value that is not an integer", key), false);
      }
      value += delta;
      // Decimal text, as HashStore stores it: get() of a counter reads "3".
      std::string text = std::to_string(value);
      data_[key] = wire::Bytes(text.begin(), text.end());
      w.u8(uint8_t(Status::Int)).i64(value);
      break;
    }
    case Op::CompareSet: {
      std::string key = r.str(wire::kMaxKeyBytes);
      wire::Bytes expected = r.bytes(wire::kMaxValueBytes), desired = r.bytes(wire::kMaxValueBytes);
      auto it = data_.find(key);
      bool matches = it == data_.end() ? expected.empty() : it->second == expected;
      if (matches) data_[key] = desired;
      w.u8(uint8_t(Status::Value)).bytes(data_.count(key) ? data_[key] : wire::Bytes{});
      break;
    }
    case Op::Erase: {
      std::string key = r.str(wire::kMaxKeyBytes);
      // No parked request needs re-checking: an erase never completes a wait.
      w.u8(uint8_t(Status::Int)).i64(data_.erase(key) > 0 ? 1 : 0);
      break;
    }
    case Op::Check: {
      int64_t n = r.i64();
      NANODDP_CHECK(n >= 0 && size_t(n) <= wire::kMaxKeysPerRequest, "too many keys in one store request ({})", n);
      std::vector<std::string> keys;
      for (int64_t i = 0; i < n; i++) keys.push_back(r.str(wire::kMaxKeyBytes));
      w.u8(uint8_t(Status::Int)).i64(all_present(keys) ? 1 : 0);
      break;
    }
    default:
      return reply_error(c, fmt::format("unknown store request {}", int(op)), true);
  }
  reply(c, w);
}

void TcpStoreServer::Loop::serve_parked(Clock::time_point now) {
  // Repeat while answering one request (and reading the next one pipelined behind it) may have
  // changed the data other parked requests wait for.
  for (bool answered = true; answered;) {
    answered = false;
    for (auto& cp : clients_) answered = serve_parked_one(*cp, now) || answered;
  }
}

bool TcpStoreServer::Loop::serve_parked_one(Client& c, Clock::time_point now) {
  if (!c.parked) return false;
  bool ready = all_present(c.parked_keys);
  if (!ready && now < c.deadline) return false;
  wire::Writer w;
  if (ready && c.parked_op == Op::Get) {
    w.u8(uint8_t(Status::Value)).bytes(data_[c.parked_keys[0]]);
  } else if (ready) {
    w.u8(uint8_t(Status::Ok));
  } else {
    std::vector<std::string> missing;
    for (auto& k : c.parked_keys)
      if (!data_.count(k)) missing.push_back(k);
    w.u8(uint8_t(Status::Timeout)).i64(int64_t(missing.size()));
    for (auto& k : missing) w.str(k);
  }
  reply(c, w);
  c.parked = false;
  c.parked_keys.clear();
  // The client may have pipelined its next request while this one was parked.
  handle_frames(c);
  return true;
}

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options) : options_(std::move(options)) {
  // Bound and listening before the thread starts: port() is valid once the constructor returns, and a
  // taken port throws here, in the caller.
  net::Fd listener = net::listen_tcp(options_.host, options_.port, &port_);
  loop_ = std::make_unique<Loop>(std::move(listener), options_.token, &clients_);
  thread_ = std::thread([this] { loop_->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  // The loop returns at its next poll(); the connections close as the Loop is destroyed.
  loop_->stop();
  thread_.join();
}

}  // namespace nanoddp::dist
