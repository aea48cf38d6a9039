// A rendezvous key-value store, like PyTorch's c10d Store. Ranks use it to find each other (Gloo's
// pair addresses, NCCL's unique id), to compare their configurations, and the launchers use it to
// agree on restarts. Implementations: TcpStore (a server at MASTER_ADDR:MASTER_PORT, see
// rendezvous/tcp_store.h), HashStore (in memory, for ranks that are threads of one process) and
// PrefixStore (a namespace inside another store).
//
// Every implementation is thread-safe: a process group's heartbeat thread shares the store with
// the training thread (comm/collective_watch.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nanoddp::dist {

// Values are raw bytes (NCCL's unique id is binary); keys are text.
using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;

  // Overwrites, and wakes every get() or wait() that needs `key`.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until `key` exists (up to timeout()), then returns its value.
  virtual Bytes get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored at `key` (missing = 0) and returns the result.
  // The value is kept as decimal text (get() then reads "3"); a key holding anything else is an Error.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // If the value at `key` equals `expected` (an empty `expected` matches a missing key), stores
  // `desired`. Returns the value now stored.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // Removes `key`; returns whether it existed.
  // Wakes no one: waiters wait for keys to appear, and an erase never makes one appear.
  virtual bool erase(const std::string& key) = 0;
  // Whether every key exists now (does not wait).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits until every key exists; throws nanoddp::Error naming the missing keys after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  std::chrono::milliseconds timeout() const { return timeout_; }
  // A plain member: set it before the store is shared between threads.
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // Convenience for text values.
  void set_string(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 private:
  // 300 s, c10d's default store timeout.
  std::chrono::milliseconds timeout_{std::chrono::seconds(300)};
};

}  // namespace nanoddp::dist
