// TcpStoreServer: one thread, one poll() loop over the listening socket, a wake-up eventfd and
// every client connection.
//
// Each connection carries one request at a time (the client waits for the reply before sending the
// next). Requests that may block (Get of a missing key, Wait) are parked on the connection with a
// deadline; every change to the data re-checks the parked requests, and the poll timeout is the
// nearest deadline, so a parked request is answered as soon as its keys exist or with Timeout when
// its deadline passes. Nothing a client sends can block the loop.
//
// Note [store limits]
// The store listens where other programs can reach it (every interface on a multi-node job), and
// the process hosting it is the launcher, every worker's parent. So what a peer that is not a
// client can cost it is bounded, whatever it sends:
//  - Memory. Until its Hello has succeeded, a connection may send one frame of at most
//    wire::kMaxHelloFrameBytes (8 KiB: the largest Hello with a 4 KiB token fits), and the server
//    reads no more than that frame from it. A bigger length prefix gets an error reply and the
//    connection is closed without the frame being read, let alone allocated.
//  - Connections. At most max_unauthenticated (256) connections may be waiting for their Hello.
//    A client's Hello is usually in the socket before the server accepts it (the client sends it
//    as soon as connect() returns), so it is read at once and the connection never waits; the
//    limit thus only meets strangers and stalled peers. When it is reached, the oldest waiting
//    connection is closed to make room: refusing the newcomer instead would let anyone who holds
//    256 idle sockets lock every new client out. 256 keeps strangers to a quarter of the common
//    1024-descriptor limit and to 2 MiB of buffers. Beyond max_connections (16384: four
//    connections for each of 4096 ranks; a rank holds one, plus one per thread blocked in a get)
//    newcomers are closed at once. Clients retry a connection closed before its Hello reply
//    (tcp_store.cpp), so a refusal costs a legitimate client a retry, not its job.
//  - Time. A connection that has not completed its Hello within hello_timeout (20 s) of being
//    accepted is closed. The clock starts at accept, not at its last byte, so a peer trickling a byte
//    now and then cannot keep a slot; 20 s is far beyond a Hello's one round trip, even on a loaded
//    machine.
//    Authenticated connections are never timed out: a get may rightly block for many minutes.
//  - CPU. When accept() fails because the process is out of descriptors (EMFILE, ENFILE) or memory,
//    the pending connection stays in the kernel's queue and the listening socket stays readable;
//    polling it again at once would spin. The loop instead leaves the listening socket out of
//    poll() for accept_backoff (250 ms: four failed accepts a second cost nothing, and a connection
//    waiting meanwhile is served within 250 ms of a descriptor coming free), keeps serving its
//    clients, and prints one warning (at most one a minute). Nor can a flood of connections keep the
//    loop accepting: it takes at most kAcceptsPerRound of them before it serves its clients again.
// With NANODDP_STORE_TOKEN set, "authenticated" means "knows the token". Without one, anyone who
// can connect may say Hello, and the authenticated limits (frames of 33 MiB, no timeout) apply to
// them: the launcher warns about that on multi-node jobs (launch/launcher.cpp).
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <deque>
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

// What an unauthenticated connection may have buffered: one Hello frame with its length prefix.
constexpr size_t kMaxHelloBuffer = 4 + wire::kMaxHelloFrameBytes;
// Between two warnings of the same kind, so that a flood of connections cannot flood the console.
constexpr auto kWarnEvery = std::chrono::seconds(60);
// Connections accepted per round of the loop. A flood of new connections could otherwise keep the
// loop in accept() while its clients wait; after this many it serves them a round and comes back.
// A start-up burst of thousands of ranks takes a few rounds of microseconds each.
constexpr int kAcceptsPerRound = 128;

struct Client {
  net::Fd fd;
  bool authenticated = false;
  bool close_after_flush = false;  // an error reply was queued; drop the client once it is sent
  bool dropped = false;            // closed this round; removed from the list at the end of it
  wire::Bytes in;                  // bytes received, not yet parsed into frames
  wire::Bytes out;                 // reply bytes not yet sent
  size_t out_sent = 0;
  // A parked Get or Wait.
  bool parked = false;
  Op parked_op = Op::Get;
  std::vector<std::string> parked_keys;
  // When a parked request is answered with Timeout.
  Clock::time_point deadline;
  // When the connection is closed unless it has authenticated (Note [store limits]); also bounds
  // how long a final error reply may take to leave. Never, for a client in good standing.
  Clock::time_point expires = Clock::time_point::max();

  bool wants_output() const { return out_sent < out.size(); }
  // Whether to read more: not after a final error, and before the Hello only up to one frame.
  bool wants_input() const { return !close_after_flush && (authenticated || in.size() < kMaxHelloBuffer); }
};

// poll()'s timeout for waking at `at`: -1 for never, rounded up so as not to wake just before it.
int poll_timeout_ms(Clock::time_point at, Clock::time_point now) {
  if (at == Clock::time_point::max()) return -1;
  // +1 ms: duration_cast rounds down, and waking just before a deadline would only poll again.
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - now).count() + 1;
  return int(std::clamp<int64_t>(left, 0, 1 << 30));
}

// A rate limit for one kind of warning.
struct WarnGate {
  Clock::time_point last = Clock::time_point::min();
  bool open(Clock::time_point now) {
    if (last != Clock::time_point::min() && now - last < kWarnEvery) return false;
    last = now;
    return true;
  }
};

}  // namespace

class TcpStoreServer::Loop {
 public:
  Loop(net::Fd listener, TcpStoreServerOptions options, int port, std::atomic<int>* client_count)
      : listener_(std::move(listener)), options_(std::move(options)), port_(port), client_count_(client_count) {
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
  // Accepts what the listening socket has queued, within the limits of Note [store limits].
  void accept_clients(Clock::time_point now);
  void admit(net::Fd fd, Clock::time_point now, std::deque<Client*>* waiting, size_t* open);
  void pause_accepting(int err, Clock::time_point now);
  // Reads what is available; returns false when the client is gone.
  bool read_from(Client& c);
  bool write_to(Client& c);
  void drop(Client& c) {
    c.fd.reset();  // now, not at the end of the round: under EMFILE every descriptor counts
    c.dropped = true;
    c.parked = false;
  }
  void handle_frames(Client& c);
  void handle(Client& c, wire::Reader& r);
  void handle_hello(Client& c, wire::Reader& r, Op op);
  void handle_add(Client& c, wire::Reader& r);
  void reply(Client& c, wire::Writer& w) {
    wire::Bytes frame = w.take();
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
  void reply_error(Client& c, const std::string& message, bool close) {
    wire::Writer w;
    w.u8(uint8_t(Status::Error)).str(message);
    reply(c, w);
    if (close) {
      c.close_after_flush = true;
      // A peer that never reads its error reply must not keep the connection open forever.
      c.expires = std::min(c.expires, Clock::now() + options_.hello_timeout);
    }
  }
  // Answers parked requests whose keys now exist, or whose deadline has passed.
  void serve_parked(Clock::time_point now);
  bool serve_parked_one(Client& c, Clock::time_point now);
  bool all_present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) > 0; });
  }

  net::Fd listener_, wake_;
  const TcpStoreServerOptions options_;  // a copy: the loop's thread reads it
  int port_;
  std::atomic<int>* client_count_;
  // In the order they were accepted (dropping keeps the order), so the oldest come first.
  std::vector<std::unique_ptr<Client>> clients_;
  // Only the loop thread touches clients_ and data_, so they need no lock.
  std::unordered_map<std::string, wire::Bytes> data_;
  // While accept() fails for lack of resources: the listening socket is left out of poll() until then.
  Clock::time_point accept_paused_until_ = Clock::time_point::min();
  WarnGate accept_failed_warning_, full_warning_;
};

void TcpStoreServer::Loop::run() {
  std::vector<pollfd> fds;
  for (;;) {
    // Slots: [0] wake-up, [1] listener, [2...] clients in clients_ order.
    auto now = Clock::now();
    bool accepting = now >= accept_paused_until_;
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    // A negative descriptor keeps the slot but poll() skips it: no accepting during a back-off.
    fds.push_back({accepting ? listener_.get() : -1, POLLIN, 0});
    Clock::time_point wake_at = accepting ? Clock::time_point::max() : accept_paused_until_;
    for (auto& c : clients_) {
      short events = short((c->wants_input() ? POLLIN : 0) | (c->wants_output() ? POLLOUT : 0));
      fds.push_back({c->fd.get(), events, 0});
      if (c->parked) wake_at = std::min(wake_at, c->deadline);
      wake_at = std::min(wake_at, c->expires);
    }
    int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(wake_at, now));
    if (rc < 0 && errno != EINTR) NANODDP_ASSERT(false, "poll failed in the rendezvous store server: {}", errno);
    if (fds[0].revents != 0) return;  // stop() was called
    now = Clock::now();
    // The clients that were polled; accept_clients appends new ones after them.
    size_t polled = fds.size() - 2;
    for (size_t i = 0; i < polled; i++) {
      Client& c = *clients_[i];
      short ev = fds[i + 2].revents;
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        // A client that is not read from any more is done for once its peer hangs up.
        bool ok = (fds[i + 2].events & POLLIN) ? read_from(c) : (ev & (POLLHUP | POLLERR)) == 0;
        if (!ok) {
          drop(c);
          continue;
        }
      }
      handle_frames(c);
    }
    // After reading: the oldest waiting connections, which accepting may close, had their chance.
    if (fds[1].revents & POLLIN) accept_clients(now);
    // After every request of this round: a Set from one client may complete another's parked wait.
    serve_parked(now);
    for (auto& c : clients_) {
      if (c->dropped) continue;
      if (!write_to(*c) || now >= c->expires) drop(*c);
    }
    // Drop closed clients.
    size_t kept = 0;
    for (size_t i = 0; i < clients_.size(); i++) {
      if (!clients_[i]->dropped) clients_[kept++] = std::move(clients_[i]);
    }
    clients_.resize(kept);
    // Published for client_count(), which other threads read.
    client_count_->store(int(kept));
  }
}

void TcpStoreServer::Loop::accept_clients(Clock::time_point now) {
  // The connections still waiting for their Hello, oldest first: the ones to close when there are
  // too many. Rebuilt per call, which costs no more than the poll() set the round already built.
  std::deque<Client*> waiting;
  size_t open = 0;
  for (auto& c : clients_) {
    if (c->dropped) continue;
    open++;
    if (!c->authenticated) waiting.push_back(c.get());
  }
  for (int tries = 0; tries < kAcceptsPerRound; tries++) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(net::Fd(fd), now, &waiting, &open);
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // none left
    // The one connection went away before it was accepted, or a signal came: go on with the next.
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
    // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), or anything unexpected: the
    // connection stays queued, so trying again now would fail again.
    return pause_accepting(errno, now);
  }
}

void TcpStoreServer::Loop::admit(net::Fd fd, Clock::time_point now, std::deque<Client*>* waiting, size_t* open) {
  if (*open >= options_.max_connections) {
    if (full_warning_.open(now))
      log::warn("rendezvous store on port {}: {} connections are open, its limit: closing new ones until some "
                "close (clients retry)", port_, *open);
    return;  // `fd` closes here
  }
  // Requests and replies are small and latency-bound.
  net::set_nodelay(fd.get());
  auto c = std::make_unique<Client>();
  c->fd = std::move(fd);
  c->expires = now + options_.hello_timeout;
  // A client's Hello is usually waiting already: answering it now means the connection never
  // counts against max_unauthenticated (Note [store limits]).
  if (!read_from(*c)) return;  // gone already
  handle_frames(*c);
  if (!c->authenticated) {
    if (waiting->size() >= options_.max_unauthenticated) {
      Client* oldest = waiting->front();
      waiting->pop_front();
      drop(*oldest);
      (*open)--;
    }
    waiting->push_back(c.get());
  }
  (*open)++;
  clients_.push_back(std::move(c));
}

void TcpStoreServer::Loop::pause_accepting(int err, Clock::time_point now) {
  accept_paused_until_ = now + options_.accept_backoff;
  if (!accept_failed_warning_.open(now)) return;
  rlimit lim{};
  std::string limit = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY
                          ? fmt::format(" (this process may open {} descriptors; it serves {} connections)",
                                        lim.rlim_cur, clients_.size())
                          : "";
  log::warn("rendezvous store on port {}: cannot accept connections: {}{}; retrying every {} ms while serving "
            "the connections already open: raise the limit (ulimit -n) if the job needs more",
            port_, std::strerror(err), limit, options_.accept_backoff.count());
}

bool TcpStoreServer::Loop::read_from(Client& c) {
  // 64 KiB per recv: a large value arrives over several calls. A short read means the socket is
  // drained, which saves the recv() that would only return EAGAIN.
  uint8_t buf[64 << 10];
  for (;;) {
    size_t want = sizeof buf;
    if (!c.authenticated) {
      // Before the Hello, no more than one small frame (Note [store limits]); handle_frames acts on it.
      if (c.in.size() >= kMaxHelloBuffer) return true;
      want = std::min(want, kMaxHelloBuffer - c.in.size());
    }
    ssize_t k = ::recv(c.fd.get(), buf, want, 0);
    if (k > 0) {
      c.in.insert(c.in.end(), buf, buf + k);
      if (size_t(k) < want) return true;
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
    // Refused as soon as its length is read: the reply goes out, then the connection closes. The
    // limit is checked per frame: a Hello in this loop raises it for the frames after it.
    size_t limit = c.authenticated ? wire::kMaxFrameBytes : wire::kMaxHelloFrameBytes;
    if (len > limit) {
      std::string why = c.authenticated
                            ? fmt::format("request of {} bytes exceeds the store's limit of {} bytes", len, limit)
                            : fmt::format("a first request of {} bytes exceeds the limit of {} bytes before the Hello: "
                                          "this port is a nanoddp rendezvous store", len, limit);
      reply_error(c, why, true);
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
  // Before the Hello at most one frame is buffered; a final error means the rest is never read.
  if (c.close_after_flush) {
    c.in.clear();
  } else {
    c.in.erase(c.in.begin(), c.in.begin() + pos);
  }
}

// The first request of a connection: Hello with the magic, the protocol version and the token.
void TcpStoreServer::Loop::handle_hello(Client& c, wire::Reader& r, Op op) {
  // Before Hello succeeds, fields are read with small limits, so a stranger cannot make the server
  // allocate much; any failure replies and closes.
  std::string magic = op == Op::Hello ? r.str(wire::kMaxMagicBytes) : "";
  if (magic != wire::kMagic) return reply_error(c, "this port is not a nanoddp rendezvous store", true);
  int64_t version = r.i64();
  std::string token = r.str(wire::kMaxTokenBytes);
  if (version != wire::kVersion)
    return reply_error(c, fmt::format("store protocol version {} is not the server's {}: use the same nanoddp "
                                      "build on every node", version, wire::kVersion), true);
  if (!same_token(token, options_.token))
    return reply_error(c, token.empty() ? "the store requires a token: set NANODDP_STORE_TOKEN to the job's token"
                                        : "wrong token: set NANODDP_STORE_TOKEN to the same value on every node",
                       true);
  c.authenticated = true;
  // Authenticated connections may wait as long as their requests say (Note [store limits]).
  c.expires = Clock::time_point::max();
  wire::Writer w;
  w.u8(uint8_t(Status::Ok));
  reply(c, w);
}

// Add: an integer counter, created at 0, stored as decimal text.
void TcpStoreServer::Loop::handle_add(Client& c, wire::Reader& r) {
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
  // Counters are int64: wrapping would be undefined behaviour, so an overflow is a value error.
  if (__builtin_add_overflow(value, delta, &value))
    return reply_error(c, fmt::format("store key '{}': adding {} overflows a 64-bit counter", key, delta), false);
  // Decimal text, as HashStore stores it: get() of a counter reads "3".
  std::string text = std::to_string(value);
  data_[key] = wire::Bytes(text.begin(), text.end());
  wire::Writer w;
  w.u8(uint8_t(Status::Int)).i64(value);
  reply(c, w);
}

void TcpStoreServer::Loop::handle(Client& c, wire::Reader& r) {
  Op op = Op(r.u8());
  wire::Writer w;
  if (!c.authenticated) return handle_hello(c, r, op);
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
      // A negative timeout means "answer now"; 2^40 ms (35 years) keeps the deadline from overflowing.
      int64_t timeout_ms = std::clamp<int64_t>(r.i64(), 0, int64_t(1) << 40);
      c.parked_op = op;
      c.parked = true;
      c.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
      return;  // answered by serve_parked
    }
    case Op::Add:
      return handle_add(c, r);
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
  NANODDP_CHECK(options_.max_connections >= 1 && options_.max_unauthenticated >= 1,
                "rendezvous store limits must admit at least one connection (max_connections {}, "
                "max_unauthenticated {})", options_.max_connections, options_.max_unauthenticated);
  net::Fd listener = net::listen_tcp(options_.host, options_.port, &port_);
  loop_ = std::make_unique<Loop>(std::move(listener), options_, port_, &clients_);
  thread_ = std::thread([this] { loop_->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  // The loop returns at its next poll(); the connections close as the Loop is destroyed.
  loop_->stop();
  thread_.join();
}

}  // namespace nanoddp::dist
