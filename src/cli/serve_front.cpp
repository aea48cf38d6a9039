#include "cli/serve_front.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cli/serve_request_frame.h"
#include "core/error.h"

namespace nanoddp::cli {

namespace {

using namespace std::chrono_literals;

constexpr size_t kMaxHead = 32 << 10;       // a request's head (cpp-httplib takes 8 KiB a line)
constexpr size_t kReadChunk = 64 << 10;     // one recv per readable connection per poll round
constexpr size_t kMaxLingering = 64;        // 503-refused connections left to linger; more close at once
constexpr auto kLinger = 1s;
constexpr auto kAcceptPause = 250ms;        // no descriptor left for a new connection: try again after this
constexpr int kWriteTimeoutMs = 5000;       // a client that takes nothing for this long is gone

const char* reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
  }
  return "Error";
}

// A whole response that closes the connection, with serve's JSON error body.
std::string error_response(int status, const std::string& message) {
  const std::string body = nlohmann::json{{"error", message}}.dump(-1, ' ', false,
                                                                    nlohmann::json::error_handler_t::replace);
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n"
                     "{}\r\n{}", status, reason(status), body.size(), status == 503 ? "Retry-After: 1\r\n" : "", body);
}

// Sends what the socket takes now (the front never waits on a client). Small responses to a fresh
// connection fit its send buffer whole; what does not fit is dropped with the connection.
void send_now(int fd, const std::string& data) {
  [[maybe_unused]] const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void endpoint(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  char text[INET6_ADDRSTRLEN] = "";
  port = 0;
  if (rc == 0 && a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    port = ntohs(in->sin_port);
  } else if (rc == 0 && a.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof text);
    port = ntohs(in->sin6_port);
  }
  ip = text;
}

// One request, already read whole, for cpp-httplib to parse; the response goes to the socket.
class RequestStream : public httplib::Stream {
 public:
  RequestStream(int fd, std::string_view request) : fd_(fd), request_(request) {}
  bool is_readable() const override { return pos_ < request_.size(); }
  // Writable within the write timeout, and the client has not closed its end (as cpp-httplib's own
  // stream: this is how a streamed reply finds that its client left).
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, kWriteTimeoutMs) != 1 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - pos_);
    std::memcpy(ptr, request_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { endpoint(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { endpoint(fd_, false, ip, port); }
  // cpp-httplib uses it only to refuse descriptors past select()'s FD_SETSIZE (500); serve keeps
  // its descriptors below that (--max_connections is at most 512).
  socket_t socket() const override { return fd_; }

 private:
  int fd_;
  std::string_view request_;
  size_t pos_ = 0;
};

}  // namespace

ServeFront::ServeFront(const Limits& limits) : limits_(limits) {
  // What cpp-httplib's "Keep-Alive: timeout=N" header tells clients: the front's idle timeout.
  set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(limits.idle_timeout).count());
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  NANODDP_CHECK(wake_fd_ >= 0, "serve: cannot create an eventfd ({})", std::strerror(errno));
}

ServeFront::~ServeFront() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::close(wake_fd_);
}

int ServeFront::bind(const std::string& host, int64_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  int err = 0;
  for (addrinfo* a = gai == 0 ? found : nullptr; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    // SO_REUSEADDR, not SO_REUSEPORT (cpp-httplib's default): a restart may bind while old connections
    // linger in TIME_WAIT, but a port someone listens on stays an error.
    const int yes = 1;
    if (fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) == 0 &&
        ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      err = errno;
      if (fd >= 0) ::close(fd);
    }
  }
  if (found != nullptr) ::freeaddrinfo(found);
  NANODDP_CHECK(listen_fd_ >= 0, "cannot listen on {}:{} ({}): another process may hold the port (choose another "
                "--port, or 0 for any free one), or --host is not an address of this machine", host, port,
                gai != 0 ? ::gai_strerror(gai) : std::strerror(err));
  svr_sock_ = listen_fd_;  // cpp-httplib ends streamed responses once this is INVALID_SOCKET
  std::string ip;
  int bound = 0;
  endpoint(listen_fd_, false, ip, bound);
  return bound;
}

void ServeFront::stop() {
  stopping_ = true;
  svr_sock_ = INVALID_SOCKET;
  wake();
}

void ServeFront::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void ServeFront::run() {
  workers_ = std::make_unique<httplib::ThreadPool>(limits_.workers);
  while (!stopping_) poll_once();
  for (auto& c : connections_)
    if (!c->with_worker) close_connection(*c);
  connections_.clear();
  workers_->shutdown();  // each finishes its response; hand_back() then closes
  std::lock_guard lock(mu_);
  for (auto& c : returned_) close_connection(*c);
  returned_.clear();
}

// One round: waits for a readable socket, a wake-up or the nearest deadline, then serves them.
void ServeFront::poll_once() {
  // Out of descriptors, the listening socket stays readable: it is left alone for a while instead
  // of spinning, and the clients already connected are served meanwhile.
  const short accepting = Clock::now() >= accept_paused_until_ ? POLLIN : 0;
  std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}, {listen_fd_, accepting, 0}};
  auto next = Clock::now() + (accepting ? 1000ms : kAcceptPause);
  for (const auto& c : connections_) {
    fds.push_back({c->fd, POLLIN, 0});
    next = std::min(next, c->deadline);
  }
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now());
  ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait.count())));
  std::vector<ConnectionPtr> ready;  // those to frame again: new bytes, or handed back
  for (size_t i = 2; i < fds.size(); i++) {
    const ConnectionPtr& c = connections_[i - 2];
    if (fds[i].revents == 0) continue;
    char buf[kReadChunk];
    const ssize_t n = ::recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      close_connection(*c);  // gone, or done lingering
    } else if (n > 0) {
      // A request's time starts with its first byte; before that the connection was idle.
      if (c->buffer.empty() && !c->closing) c->deadline = Clock::now() + limits_.request_timeout;
      c->buffer.append(buf, static_cast<size_t>(n));
      ready.push_back(c);
    }
  }
  if (fds[0].revents != 0) {
    uint64_t count;
    [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof count);
    std::lock_guard lock(mu_);
    for (auto& c : returned_) {
      c->with_worker = false;
      c->deadline = Clock::now() + (c->buffer.empty() ? limits_.idle_timeout : limits_.request_timeout);
      connections_.push_back(c);
      ready.push_back(c);
    }
    returned_.clear();
  }
  if (fds[1].revents != 0) accept_all();
  for (const auto& c : ready)
    if (c->fd >= 0) on_data(c);
  // A connection with a worker belongs to it: not even its descriptor is read here until it comes back.
  const auto now = Clock::now();
  for (const auto& c : connections_) {
    if (c->with_worker || c->fd < 0 || c->deadline > now) continue;
    if (c->closing || c->buffer.empty())
      close_connection(*c);  // done lingering, or idle with nothing asked
    else
      refuse(*c, 408, fmt::format("the request did not arrive whole within {} s of its first byte; send it at once",
                                  limits_.request_timeout.count() / 1000.0));
  }
  std::erase_if(connections_, [](const ConnectionPtr& c) { return c->with_worker || c->fd < 0; });
}

// Each connection waiting to be accepted; beyond max_connections, a 503.
void ServeFront::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) accept_paused_until_ = Clock::now() + kAcceptPause;
    if (fd < 0) return;
    // Every token is its own small write: without TCP_NODELAY Nagle's algorithm would hold them back.
    const int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    auto c = std::make_shared<Connection>();
    c->fd = fd;
    c->deadline = Clock::now() + limits_.idle_timeout;
    if (open_ >= limits_.max_connections) {
      c->counted = false;
      if (lingering_ >= kMaxLingering) {
        send_now(fd, error_response(503, "busy: too many open connections (--max_connections); try again later"));
        ::close(fd);
        continue;
      }
      lingering_++;
      refuse(*c, 503, fmt::format("busy: {} connections are open (--max_connections); try again later",
                                  limits_.max_connections));
    } else {
      open_++;
    }
    connections_.push_back(std::move(c));
  }
}

void ServeFront::on_data(const ConnectionPtr& c) {
  if (c->closing) {
    c->buffer.clear();  // lingering: what the client still sends is dropped
    return;
  }
  const RequestFrame f = frame_request(c->buffer, limits_.max_body, kMaxHead);
  switch (f.state) {
    case RequestFrame::State::Incomplete:
      if (f.expect_continue && !c->continued) send_now(c->fd, "HTTP/1.1 100 Continue\r\n\r\n");
      c->continued = c->continued || f.expect_continue;
      return;
    case RequestFrame::State::Refused:
      return refuse(*c, f.status, f.message);
    case RequestFrame::State::Complete:
      c->continued = false;
      c->with_worker = true;  // set before the worker can run
      workers_->enqueue([this, c, size = f.size] { answer(c, size); });
      return;
  }
}

void ServeFront::refuse(Connection& c, int status, const std::string& message) {
  send_now(c.fd, error_response(status, message));
  ::shutdown(c.fd, SHUT_WR);
  c.closing = true;
  c.buffer.clear();
  c.deadline = Clock::now() + kLinger;
}

void ServeFront::answer(const ConnectionPtr& c, size_t size) {
  RequestStream stream(c->fd, std::string_view(c->buffer).substr(0, size));
  bool closed = false;
  // The front already answered "100 Continue" where one was asked for.
  const bool ok = process_request(stream, stopping_, closed,
                                  [](httplib::Request& req) { req.headers.erase("Expect"); });
  c->buffer.erase(0, size);
  if (!ok || closed || stopping_) return close_connection(*c);
  hand_back(c);
}

void ServeFront::hand_back(const ConnectionPtr& c) {
  std::lock_guard lock(mu_);
  if (stopping_) return close_connection(*c);
  returned_.push_back(c);
  wake();
}

void ServeFront::close_connection(Connection& c) {
  if (c.fd < 0) return;
  ::close(c.fd);
  c.fd = -1;
  if (c.counted)
    open_--;
  else
    lingering_--;
}

}  // namespace nanoddp::cli
