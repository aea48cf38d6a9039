// serve's front: one thread accepts the connections and reads the requests, so that a slow or silent
// client costs a descriptor and a buffer, never a worker thread.
//
// Why not cpp-httplib's own listen() (0.11): it gives each connection a worker thread from accept to
// close, and its read timeout starts again with every byte. 24 clients that each send half a request
// hold all 24 workers for 5 s at a time (a byte every 4 s holds one for ever): /health waited 14-49 s
// behind 200 of them. It also reads each keep-alive request through a buffer of its own, so a second
// request that came in the same packet as the first (pipelining) was lost.
//
// Here one thread polls every connection. A connection may stay idle for `idle_timeout` (after it
// is accepted, or after its last response), and is then closed; from a request's first byte it has
// `request_timeout` to deliver all of it, head and Content-Length body (serve_request_frame.h,
// which also refuses what it cannot frame: 400, 411, 413, 431), else 408: a byte at a time does not
// extend it. A whole request goes to a worker, which
// has cpp-httplib route and answer it (Server::process_request over the bytes already read) and hands
// the connection back. Bytes past the request (a pipelined one) stay in the connection's buffer, so a
// connection's requests are answered one at a time, in order. Beyond `max_connections` open
// connections, a new one is answered 503 at once.
//
// A refused connection lingers for a second after its error response, reading and dropping what the
// client still sends: closing a socket with unread bytes resets it, and the reset can destroy the
// response before the client reads it.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace nanoddp::cli {

class ServeFront : public httplib::Server {
 public:
  struct Limits {
    size_t max_connections = 256;
    size_t workers = 24;
    uint64_t max_body = 64 << 10;  // --max_request_bytes
    std::chrono::milliseconds request_timeout{10000};  // from a request's first byte to its last
    std::chrono::milliseconds idle_timeout{10000};     // a connection with no request under way
  };
  explicit ServeFront(const Limits& limits);
  ~ServeFront() override;
  ServeFront(const ServeFront&) = delete;
  ServeFront& operator=(const ServeFront&) = delete;

  // Listens on host:port (port 0: any free one) and returns the port. Throws nanoddp::Error.
  int bind(const std::string& host, int64_t port);
  // Accepts and reads until stop(), answering on `workers` threads; returns once every worker is done.
  void run();
  // From any thread, before or during run(): stops accepting and reading, ends streamed responses.
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection {
    int fd = -1;
    std::string buffer;        // bytes read and not yet answered, from the start of a request
    Clock::time_point deadline;
    bool continued = false;    // "100 Continue" sent for the request being read
    bool closing = false;      // refused: lingers, dropping what comes, until EOF or its deadline
    bool counted = true;       // counts against max_connections (a 503-refused one does not)
    bool with_worker = false;  // answered on a worker (front thread only: set on hand-over, cleared on return)
  };
  using ConnectionPtr = std::shared_ptr<Connection>;

  void poll_once();
  void accept_all();
  // Frames what `c` holds: keeps reading, refuses, or hands a whole request to a worker.
  void on_data(const ConnectionPtr& c);
  void refuse(Connection& c, int status, const std::string& message);
  void answer(const ConnectionPtr& c, size_t size);  // on a worker
  void hand_back(const ConnectionPtr& c);            // on a worker
  void close_connection(Connection& c);
  void wake();

  const Limits limits_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop() and handed-back connections
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> open_{0};   // connections that count against max_connections, front or worker
  Clock::time_point accept_paused_until_;  // out of descriptors: no accept before this
  size_t lingering_ = 0;          // 503-refused connections lingering (front thread only)
  std::vector<ConnectionPtr> connections_;  // in the front (front thread only)
  std::unique_ptr<httplib::ThreadPool> workers_;
  std::mutex mu_;
  std::vector<ConnectionPtr> returned_;  // handed back by workers, guarded by mu_
};

}  // namespace nanoddp::cli
