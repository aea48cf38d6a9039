#include "rendezvous/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"

namespace nanoddp::dist::net {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// getaddrinfo for a TCP or UDP endpoint; null with *why on failure.
AddrInfoPtr resolve(const std::string& host, int port, int socktype, bool passive, std::string* why) {
  addrinfo hints{};
  // IPv4 and IPv6 both: callers try the addresses in the order getaddrinfo ranks them.
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    if (why) *why = fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc));
    return nullptr;
  }
  return AddrInfoPtr(res);
}

int ms_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  // poll() takes an int of milliseconds: cap at 2^30 (about 12 days) so a far deadline cannot overflow.
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// Waits for `events` on fd until the deadline; false (with *why) on timeout or poll error.
bool wait_fd(int fd, short events, Clock::time_point deadline, std::string* why) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, ms_until(deadline));
    if (rc > 0) return true;
    if (rc == 0) {
      *why = "timed out";
      return false;
    }
    // EINTR: a signal interrupted poll(); go round again with the time that is left.
    if (errno != EINTR) {
      *why = errno_text(errno);
      return false;
    }
  }
}

}  // namespace

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  NANODDP_ASSERT(flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0);
}

void set_nodelay(int fd) {
  int one = 1;
  // Best effort: without it only latency suffers.
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Fd listen_tcp(const std::string& host, int port, int* bound_port) {
  // The addresses to try, in order. "" binds the IPv6 wildcard, which also accepts IPv4 where the
  // system allows dual-stack sockets, then the IPv4 wildcard where IPv6 is off. "localhost" binds
  // the loopback address by number: resolving the name may give ::1 only, or list it first, and
  // the IPv4 one is what MASTER_ADDR=127.0.0.1 clients dial.
  std::vector<std::string> names = host.empty()           ? std::vector<std::string>{"::", "0.0.0.0"}
                                   : host == "localhost" ? std::vector<std::string>{"127.0.0.1", "::1"}
                                                         : std::vector<std::string>{host};
  bool ours = host.empty() || host == "localhost";  // an address we chose, not the user's
  std::string why;
  int last_err = 0;
  bool resolved = false;
  for (const std::string& name : names) {
    AddrInfoPtr addrs = resolve(name, port, SOCK_STREAM, true, &why);
    if (!addrs) continue;
    resolved = true;
    for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd.valid()) {
        last_err = errno;
        continue;
      }
      int one = 1, zero = 0;
      // SO_REUSEADDR: a restarted job can bind the port while the old server's connections sit in
      // TIME_WAIT. V6ONLY off explicitly: some systems default to IPv6-only sockets.
      setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (a->ai_family == AF_INET6) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      // A backlog of 1024: every rank of a job connects at about the same moment at start-up.
      if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 1024) != 0) {
        last_err = errno;
        // The port is taken: another address would not help, and would hide the reason.
        if (last_err == EADDRINUSE) break;
        continue;
      }
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      // The port actually bound, which differs from `port` when that was 0.
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
      *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      set_nonblocking(fd.get());
      return fd;
    }
    if (last_err == EADDRINUSE) break;
  }
  NANODDP_CHECK(resolved, "cannot listen on {}:{}: {}", host, port, why);
  std::string where = ours ? "this host" : host;
  NANODDP_CHECK(last_err != EADDRINUSE,
                "port {} on {} is already in use: pick another --master_port or stop the process using it", port,
                where);
  NANODDP_FAIL("cannot listen on {}:{}: {}{}", host.empty() ? "*" : host, port, errno_text(last_err),
               ours ? "" : fmt::format(": check that {} is an address of this machine", host));
}

Fd try_connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout, std::string* why) {
  AddrInfoPtr addrs = resolve(host, port, SOCK_STREAM, false, why);
  if (!addrs) return Fd();
  // One deadline for all of the host's addresses together.
  auto deadline = Clock::now() + timeout;
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      *why = errno_text(errno);
      continue;
    }
    set_nonblocking(fd.get());
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      // Non-blocking connect: wait until writable, then read the outcome from SO_ERROR.
      if (errno != EINPROGRESS) {
        *why = errno_text(errno);
        continue;
      }
      if (!wait_fd(fd.get(), POLLOUT, deadline, why)) continue;
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        *why = errno_text(err);
        continue;
      }
    }
    set_nodelay(fd.get());
    return fd;
  }
  return Fd();
}

bool send_all(int fd, const void* data, size_t n, Clock::time_point deadline, std::string* why) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // MSG_NOSIGNAL: a peer that went away gives EPIPE here instead of killing the process with SIGPIPE.
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline, why)) return false;
    } else if (k < 0 && errno != EINTR) {
      *why = errno_text(errno);
      return false;
    }
  }
  return true;
}

bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline, std::string* why) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k == 0) {
      *why = "connection closed by the other side";
      return false;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, deadline, why)) return false;
    } else if (errno != EINTR) {
      *why = errno_text(errno);
      return false;
    }
  }
  return true;
}

std::string local_address_toward(const std::string& host, int port) {
  std::string why;
  AddrInfoPtr addrs = resolve(host, port, SOCK_DGRAM, false, &why);
  NANODDP_CHECK(addrs, "cannot find this host's address toward MASTER_ADDR: {}: check MASTER_ADDR", why);
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    // Connecting a UDP socket sends nothing; it makes the kernel pick the route and source address.
    if (!fd.valid() || ::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* src = ss.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
    if (inet_ntop(ss.ss_family, src, text, sizeof text) != nullptr) return text;
  }
  NANODDP_FAIL("no network route from this host to MASTER_ADDR {}: check MASTER_ADDR and the network", host);
}

}  // namespace nanoddp::dist::net
