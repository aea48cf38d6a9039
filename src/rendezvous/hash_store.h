// An in-memory store for ranks that are threads of one process (the collective tests). Thread-safe;
// get() and wait() block on a condition variable until the keys appear or the timeout passes.
// Also the store of a single-process run that no launcher hosts one for (comm/init.cpp): a group of
// one rank never needs another process.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "rendezvous/store.h"

namespace nanoddp::dist {

class HashStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool erase(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;

 private:
  // Waits (lock held) until every key exists; throws the timeout error naming the missing keys.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout);

  std::mutex mu_;
  std::condition_variable changed_;
  // Guarded by mu_; changed_ is notified on every set, add and compare_set.
  std::map<std::string, Bytes> data_;
};

}  // namespace nanoddp::dist
