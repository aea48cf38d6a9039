// Small TCP helpers over POSIX sockets, shared by the rendezvous store (rendezvous/tcp_store.*) and
// the Gloo device setup (comm/gloo_group.*). Sockets are non-blocking; every blocking step takes a
// deadline so that nothing here can hang forever.
#pragma once

#include <chrono>
#include <string>

namespace nanoddp::dist::net {

using Clock = std::chrono::steady_clock;

// An owned file descriptor, closed when the object goes away.
// Move-only, like unique_ptr: exactly one owner closes the descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

// Binds and listens on host:port. host "" means every interface (IPv4 and IPv6 where the system
// allows a dual-stack socket); "localhost" means the loopback interface only (127.0.0.1, or ::1
// where IPv4 is missing). port 0 picks a free port; the port bound is returned in *bound_port.
// Throws nanoddp::Error when the port is taken or the address is not this host's.
// The socket returned is non-blocking (the store server polls it).
Fd listen_tcp(const std::string& host, int port, int* bound_port);

// One attempt to connect to host:port within `timeout`. Returns an invalid Fd and the reason in
// *why when it fails (refused, unreachable, unknown host, timed out).
// Tries each address of `host` within one shared deadline. The socket returned is non-blocking with
// TCP_NODELAY. Callers retry (see TcpStore).
Fd try_connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout, std::string* why);

// Sends / receives exactly n bytes before `deadline`. On failure (peer closed, error, deadline)
// returns false with the reason in *why.
// `fd` must be non-blocking: the waits are poll() calls bounded by `deadline`.
bool send_all(int fd, const void* data, size_t n, Clock::time_point deadline, std::string* why);
bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline, std::string* why);

// The local IP address this host uses to reach host:port, found by connecting a UDP socket (no
// packet is sent). Used to bind Gloo's device to the interface that leads to the other ranks.
std::string local_address_toward(const std::string& host, int port);

// Asserts: fcntl on a valid descriptor does not fail.
void set_nonblocking(int fd);
// Disables Nagle's algorithm: store requests are small and latency-bound.
void set_nodelay(int fd);

}  // namespace nanoddp::dist::net
