// TcpStore, the client side of the rendezvous store. Each call borrows an authenticated connection
// from the pool, sends one request frame, reads one reply frame, and returns the connection.
#include "rendezvous/tcp_store.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "rendezvous/store_protocol.h"

namespace nanoddp::dist {

using wire::Op;
using wire::Status;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// The margin a client allows beyond a server-side wait before declaring the server unresponsive.
constexpr milliseconds kReplyMargin{std::chrono::seconds(30)};

std::string seconds_text(milliseconds ms) { return fmt::format("{:g}", ms.count() / 1000.0); }

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  // At most 8 keys: a wait on a thousand ranks' keys would otherwise bury the message.
  for (size_t i = 0; i < keys.size() && i < 8; i++) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 8) out += fmt::format(" and {} more", keys.size() - 8);
  return out;
}

// Limits are checked here too, so an oversized key or value fails in the caller with its size,
// instead of the server dropping the connection.
void check_key(const std::string& key) {
  NANODDP_CHECK(key.size() <= wire::kMaxKeyBytes, "store key of {} bytes exceeds the limit of {} bytes",
                key.size(), wire::kMaxKeyBytes);
}

void check_value(const std::string& key, size_t bytes) {
  NANODDP_CHECK(bytes <= wire::kMaxValueBytes, "store value for key '{}' is {} bytes; the limit is {} bytes", key,
                bytes, wire::kMaxValueBytes);
}

}  // namespace

// One reply: its status and the rest of its payload.
struct TcpStore::Reply {
  Status status = Status::Ok;
  wire::Bytes payload;
  // Skips the status byte.
  wire::Reader reader() const { return wire::Reader(payload.data() + 1, payload.size() - 1); }
};

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {
  set_timeout(options_.timeout);
  // The first connection is made now, so a wrong address or token fails at construction.
  idle_.push_back(connect_once(options_.connect_timeout));
}

TcpStore::~TcpStore() = default;

std::string TcpStore::endpoint() const { return fmt::format("{}:{}", options_.host, options_.port); }

net::Fd TcpStore::connect_once(milliseconds connect_timeout) {
  // Checked here, with its size, rather than met as the server closing the connection.
  NANODDP_CHECK(options_.token.size() <= wire::kMaxTokenBytes,
                "NANODDP_STORE_TOKEN is {} bytes; the rendezvous store accepts at most {}: use a shorter token",
                options_.token.size(), wire::kMaxTokenBytes);
  // Retry with backoff: the server may start after this client (rank 0 can be slower to launch),
  // and a server at its connection limit closes new connections before answering their Hello
  // (Note [store limits] in tcp_store_server.cpp).
  auto deadline = Clock::now() + connect_timeout;
  // 20 ms doubling up to 1 s: quick when the server is about to start, light on it when it is late.
  // Each attempt gets at most 5 s, so a host that drops packets is tried again rather than once.
  milliseconds backoff{20};
  std::string why = "no attempt made";
  bool refused = false;  // the last attempt connected, and the peer closed before answering
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    net::Fd fd =
        net::try_connect_tcp(options_.host, options_.port, std::clamp(left, milliseconds(1), milliseconds(5000)), &why);
    if (fd.valid() && hello(fd, connect_timeout, &why)) return fd;
    refused = fd.valid();
    if (Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
  NANODDP_CHECK(!refused,
                "the rendezvous store at {} closed the connection before answering, attempt after attempt for {} s "
                "({}): it may be at its connection limit (see the output of the process hosting it), or another "
                "program is using this port: check MASTER_PORT",
                endpoint(), seconds_text(connect_timeout), why);
  NANODDP_FAIL("could not reach the rendezvous store at {} after {} s ({}): check MASTER_ADDR/MASTER_PORT and that "
               "rank 0 / node 0 is running",
               endpoint(), seconds_text(connect_timeout), why);
}

bool TcpStore::hello(const net::Fd& fd, milliseconds connect_timeout, std::string* why) {
  // Authenticate. A server that is not ours (another service on the port) will not answer in form.
  wire::Writer w;
  Bytes frame = w.u8(uint8_t(Op::Hello)).str(wire::kMagic).i64(wire::kVersion).str(options_.token).take();
  auto reply_deadline = Clock::now() + std::min(connect_timeout + kReplyMargin, options_.request_timeout);
  uint8_t header[4];
  bool ok = net::send_all(fd.get(), frame.data(), frame.size(), reply_deadline, why) &&
            net::recv_all(fd.get(), header, 4, reply_deadline, why);
  // Closed or reset before the deadline, with no answer: refused, worth another try. Silence until
  // the deadline is not: a server that stopped serving would only be waited on again.
  if (!ok && Clock::now() < reply_deadline) return false;
  uint32_t len = ok ? wire::read_u32_be(header) : 0;
  NANODDP_CHECK(ok && len >= 1 && len <= wire::kMaxFrameBytes,
                "{} at {} did not answer as a nanoddp rendezvous store ({}): check MASTER_PORT",
                ok ? "the service" : "the rendezvous store", endpoint(), ok ? "malformed reply" : *why);
  wire::Bytes payload(len);
  NANODDP_CHECK(net::recv_all(fd.get(), payload.data(), len, reply_deadline, why),
                "lost the connection to the rendezvous store at {} during the handshake ({})", endpoint(), *why);
  if (Status(payload[0]) != Status::Ok) {
    wire::Reader r(payload.data() + 1, len - 1);
    NANODDP_FAIL("the rendezvous store at {} rejected this process: {}", endpoint(), r.str(wire::kMaxFrameBytes));
  }
  return true;
}

TcpStore::Reply TcpStore::call(const Bytes& request, milliseconds reply_within) {
  net::Fd fd;
  {
    // The pool is locked only to take or return a connection, never during I/O.
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      fd = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  // All pooled connections are busy in other threads: open another (the server is up by now).
  if (!fd.valid()) fd = connect_once(std::min(options_.connect_timeout, milliseconds(30000)));

  auto deadline = Clock::now() + reply_within;
  std::string why;
  uint8_t header[4];
  bool ok = net::send_all(fd.get(), request.data(), request.size(), deadline, &why) &&
            net::recv_all(fd.get(), header, 4, deadline, &why);
  uint32_t len = ok ? wire::read_u32_be(header) : 0;
  // Every reply has at least its status byte.
  if (ok && (len < 1 || len > wire::kMaxFrameBytes)) {
    ok = false;
    why = fmt::format("malformed reply of {} bytes", len);
  }
  Reply reply;
  if (ok) {
    reply.payload.resize(len);
    ok = net::recv_all(fd.get(), reply.payload.data(), len, deadline, &why);
  }
  NANODDP_CHECK(ok,
                "lost the connection to the rendezvous store at {} ({}): the process hosting it (rank 0 or the "
                "launcher) may have exited; see its output",
                endpoint(), why);
  reply.status = Status(reply.payload[0]);
  if (reply.status == Status::Error) {
    // Throwing drops this connection (fd closes here) rather than pooling it. The server closes its
    // side after protocol errors anyway; after a value error (Add on text) the pool just has one connection fewer.
    NANODDP_FAIL("rendezvous store at {}: {}", endpoint(), reply.reader().str(wire::kMaxFrameBytes));
  }
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(fd));
  return reply;
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  check_key(key);
  check_value(key, value.size());
  wire::Writer w;
  call(w.u8(uint8_t(Op::Set)).str(key).bytes(value).take(), options_.request_timeout);
}

Bytes TcpStore::get(const std::string& key) {
  check_key(key);
  wire::Writer w;
  // The server waits up to timeout(); the client allows kReplyMargin more before it gives up on it.
  Reply r = call(w.u8(uint8_t(Op::Get)).str(key).i64(timeout().count()).take(), timeout() + kReplyMargin);
  NANODDP_CHECK(r.status == Status::Value,
                "timed out after {} s waiting for key '{}' in the rendezvous store at {}: a rank may have failed "
                "before publishing it; see the other ranks' output",
                seconds_text(timeout()), key, endpoint());
  return r.reader().bytes(wire::kMaxValueBytes);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  check_key(key);
  wire::Writer w;
  Reply r = call(w.u8(uint8_t(Op::Add)).str(key).i64(delta).take(), options_.request_timeout);
  return r.reader().i64();
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  check_key(key);
  // Both values travel in one frame; each must fit the value limit.
  check_value(key, std::max(expected.size(), desired.size()));
  wire::Writer w;
  Reply r = call(w.u8(uint8_t(Op::CompareSet)).str(key).bytes(expected).bytes(desired).take(), options_.request_timeout);
  return r.reader().bytes(wire::kMaxValueBytes);
}

bool TcpStore::erase(const std::string& key) {
  check_key(key);
  wire::Writer w;
  return call(w.u8(uint8_t(Op::Erase)).str(key).take(), options_.request_timeout).reader().i64() != 0;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  NANODDP_CHECK(keys.size() <= wire::kMaxKeysPerRequest, "too many keys in one store request ({})", keys.size());
  wire::Writer w;
  w.u8(uint8_t(Op::Check)).i64(int64_t(keys.size()));
  for (auto& k : keys) {
    check_key(k);
    w.str(k);
  }
  return call(w.take(), options_.request_timeout).reader().i64() != 0;
}

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  NANODDP_CHECK(keys.size() <= wire::kMaxKeysPerRequest, "too many keys in one store request ({})", keys.size());
  wire::Writer w;
  w.u8(uint8_t(Op::Wait)).i64(int64_t(keys.size()));
  for (auto& k : keys) {
    check_key(k);
    w.str(k);
  }
  w.i64(timeout.count());
  Reply r = call(w.take(), timeout + kReplyMargin);
  if (r.status == Status::Ok) return;
  wire::Reader rd = r.reader();
  int64_t n_missing = rd.i64();
  // Checked before a vector is sized by it.
  NANODDP_CHECK(n_missing >= 0 && size_t(n_missing) <= keys.size(), "malformed reply from the rendezvous store at {}",
                endpoint());
  std::vector<std::string> missing(static_cast<size_t>(n_missing));
  for (auto& k : missing) k = rd.str(wire::kMaxKeyBytes);
  NANODDP_FAIL("timed out after {} s waiting for {} in the rendezvous store at {}: a rank may have failed to start "
               "or crashed; see the other ranks' output",
               seconds_text(timeout), join_keys(missing), endpoint());
}

}  // namespace nanoddp::dist
