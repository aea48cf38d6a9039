// The rendezvous store over TCP, like PyTorch's TCPStore: one TcpStoreServer (hosted by rank 0,
// or by the launcher `nanoddp run` on node 0) and a TcpStore client in every rank.
//
// Safety and bounds: keys, values and frames have size limits (rendezvous/store_protocol.h) checked on
// both sides; every wait has a timeout; and when NANODDP_STORE_TOKEN is set, the server accepts
// only clients presenting the same token (a client with a wrong or missing token gets a clear
// error). The token keeps stray processes from joining a job; it is not encryption.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/net.h"
#include "rendezvous/store.h"

namespace nanoddp::dist {

// The token from the environment (NANODDP_STORE_TOKEN), or "" when unset.
std::string store_token_from_env();

struct TcpStoreServerOptions {
  // Address to bind: "" = every interface; "localhost" = the loopback interface only (127.0.0.1,
  // or ::1 where IPv4 is missing), so that only processes on this machine can connect.
  std::string host;
  // 29500: torchrun's default MASTER_PORT.
  int port = 29500;                            // 0 = pick a free port (see TcpStoreServer::port())
  std::string token = store_token_from_env();  // "" = accept every client

  // Limits on what a peer costs the server before and after its Hello; the reasons for each
  // default are in Note [store limits] (tcp_store_server.cpp).
  // Connections of every kind; a newcomer beyond it is closed at once (clients retry).
  size_t max_connections = 16384;
  // Connections that have not completed their Hello; a newcomer beyond it makes the server drop
  // the oldest of them.
  size_t max_unauthenticated = 256;
  // How long a connection may take to complete its Hello before it is closed. Authenticated
  // connections have no such limit: they may sit in a blocking get for as long as they asked.
  std::chrono::milliseconds hello_timeout{std::chrono::seconds(20)};
  // How long the server stops accepting after accept() fails for lack of descriptors or memory.
  std::chrono::milliseconds accept_backoff{250};
};

// Serves the store from a background thread: one poll() loop over every client connection, so a
// thousand ranks cost one thread. Constructing binds and listens (throws nanoddp::Error "port P on
// HOST is already in use: ..." when taken); destroying stops the thread and closes every connection.
// A peer that is not a client (a port scan, garbage, a flood of connections, a full descriptor
// table) costs bounded memory and no busy loop, and does not stop the server serving the others.
class TcpStoreServer {
 public:
  explicit TcpStoreServer(TcpStoreServerOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return options_.host; }
  // Number of connections open now (for tests and diagnostics).
  // comm/init waits for it to reach 0 before it lets the server go, so that other ranks can still
  // read each other's diagnosis from the store (Note [store linger] there).
  int client_count() const { return clients_.load(); }

 private:
  class Loop;
  TcpStoreServerOptions options_;
  int port_ = 0;
  // Written by the server thread, read by client_count() from any thread.
  std::atomic<int> clients_{0};
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 29500;
  // How long to keep retrying the first connection (the server may start after the client).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  // Default timeout of get() and wait() (Store::timeout()).
  // 300 s, as Store's default.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::string token = store_token_from_env();
  // The deadline of a request the server answers at once (set, add, compare_set, erase, check, and
  // the greeting): silence this long means the server stopped serving.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(120)};
};

// A client. Safe to use from several threads at once: each call borrows a connection from a small
// pool (opening another one when all are busy), so a thread blocked in get() never holds up the
// others (the collective heartbeat relies on this, see comm/collective_watch.h).
class TcpStore final : public Store {
 public:
  // Connects (retrying until connect_timeout) and authenticates. Throws nanoddp::Error "could not
  // reach the rendezvous store at HOST:PORT after N s: ..." or the token rejection.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool erase(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;

  std::string endpoint() const;

 private:
  struct Reply;
  net::Fd connect_once(std::chrono::milliseconds connect_timeout);
  // Sends the Hello on a new connection and reads the answer. False when the peer closed the
  // connection without answering (the server refused it; worth a retry); throws nanoddp::Error on
  // a rejection (wrong token, another version) or a peer that does not speak the protocol.
  bool hello(const net::Fd& fd, std::chrono::milliseconds connect_timeout, std::string* why);
  // Sends one request frame and reads its reply; `reply_within` bounds the wait for the reply.
  // Throws nanoddp::Error when the connection breaks (it is then closed, not pooled) or the server
  // answers with an error.
  Reply call(const Bytes& request, std::chrono::milliseconds reply_within);

  TcpStoreOptions options_;
  // Guards idle_ only; no network I/O happens under it.
  std::mutex mu_;
  std::vector<net::Fd> idle_;  // connections not in use by any thread
};

}  // namespace nanoddp::dist
