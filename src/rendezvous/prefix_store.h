// A namespace inside another store: key k is stored as "<prefix>/k". Process groups and launcher
// restarts each get their own prefix, so their keys never collide.
// Users: comm/init (one prefix per restart attempt, then one per process group), the launcher
// ("nanoddp_run") and the MPI group's heartbeat. Thread-safe when the inner store is.
#pragma once

#include <memory>

#include "rendezvous/store.h"

namespace nanoddp::dist {

class PrefixStore final : public Store {
 public:
  // Takes the inner store's timeout as its own.
  // Later set_timeout() calls change this store only, not the shared inner one.
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool erase(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace nanoddp::dist
