#include "hostile_load.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <vector>

#include "core/rng.h"
#include "rendezvous/net.h"
#include "rendezvous/store_protocol.h"

namespace nanoddp::testing {

namespace {

using Clock = std::chrono::steady_clock;
enum class Kind { Garbage, Huge, Idle };

struct Peer {
  dist::net::Fd fd;
  Kind kind = Kind::Idle;
  bool header_sent = false;  // Huge: the length prefix is out
};

// A non-blocking connection to 127.0.0.1:port, made by hand rather than with net::try_connect_tcp:
// one socket() and nothing else, so it works, or fails cleanly, when descriptors are scarce.
dist::net::Fd open_to(int port) {
  dist::net::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS)
    return dist::net::Fd();
  return fd;
}

}  // namespace

HostileLoad::HostileLoad(int port, Mix mix) : port_(port), mix_(mix) {
  thread_ = std::thread([this] { run(); });
}

HostileLoad::~HostileLoad() {
  stop_ = true;
  thread_.join();
}

void HostileLoad::run() {
  // The crowd: one slot per connection, its kind fixed, its socket replaced when the server closes it.
  std::vector<Peer> peers;
  for (int i = 0; i < mix_.garbage; i++) peers.push_back({dist::net::Fd(), Kind::Garbage});
  for (int i = 0; i < mix_.huge; i++) peers.push_back({dist::net::Fd(), Kind::Huge});
  for (int i = 0; i < mix_.idle; i++) peers.push_back({dist::net::Fd(), Kind::Idle});
  Rng rng(11);
  std::vector<uint8_t> garbage(4096), zeros(64 << 10, 0), sink(64 << 10);
  uint8_t header[4];
  // A frame the server would take from an authenticated client, far beyond the Hello limit.
  dist::wire::write_u32_be(header, uint32_t(dist::wire::kMaxFrameBytes));
  auto start = Clock::now();
  std::vector<pollfd> fds;
  while (!stop_) {
    // Open what is missing, within the rate limit.
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    for (Peer& p : peers) {
      if (p.fd.valid() || opened_ >= int64_t(mix_.opens_per_second * (elapsed + 1))) continue;
      p.fd = open_to(port_);
      p.header_sent = false;
      if (p.fd.valid()) opened_++;
    }
    fds.clear();
    for (Peer& p : peers) fds.push_back({p.fd.get(), short(POLLIN | (p.kind == Kind::Idle ? 0 : POLLOUT)), 0});
    ::poll(fds.data(), fds.size(), 10);
    for (size_t i = 0; i < peers.size(); i++) {
      Peer& p = peers[i];
      short ev = fds[i].revents;
      if (!p.fd.valid() || ev == 0) continue;
      bool gone = false;
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        // An error reply, then the end of the connection; both are only counted.
        ssize_t k = ::recv(p.fd.get(), sink.data(), sink.size(), 0);
        gone = k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
      }
      if (!gone && (ev & POLLOUT)) {
        const uint8_t* data = zeros.data();
        size_t n = zeros.size();
        if (p.kind == Kind::Garbage) {
          for (auto& b : garbage) b = uint8_t(rng.next_u64());
          data = garbage.data();
          n = garbage.size();
        } else if (!p.header_sent) {
          data = header;
          n = 4;
        }
        ssize_t k = ::send(p.fd.get(), data, n, MSG_NOSIGNAL);
        if (k > 0) {
          sent_ += k;
          // A short write of the header would garble it; the next send goes on with zeros anyway,
          // which keeps the peer hostile, so it is not worth finishing.
          if (p.kind == Kind::Huge) p.header_sent = true;
        } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
          gone = true;
        }
      }
      if (gone) {
        closed_++;
        p.fd.reset();
      }
    }
  }
}

}  // namespace nanoddp::testing
