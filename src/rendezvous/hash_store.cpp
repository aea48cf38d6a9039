#include "rendezvous/hash_store.h"

#include <charconv>

#include "core/error.h"

namespace nanoddp::dist {

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard lock(mu_);
    data_[key] = value;
  }
  // Notify after unlocking, so the woken waiters do not block on the mutex at once.
  changed_.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  std::unique_lock lock(mu_);
  wait_locked(lock, {key}, timeout());
  return data_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      const char* b = reinterpret_cast<const char*>(it->second.data());
      auto [end, ec] = std::from_chars(b, b + it->second.size(), value);
      NANODDP_CHECK(ec == std::errc() && end == b + it->second.size(),
                    "store key '{}' holds a value that is not an integer", key);
    }
    // Counters are int64: wrapping would be undefined behaviour, so an overflow is an error.
    NANODDP_CHECK(!__builtin_add_overflow(value, delta, &value), "store key '{}': adding {} overflows a 64-bit "
                  "counter", key, delta);
    // Decimal text, as the TCP server stores it, so code behaves alike on both stores.
    std::string text = std::to_string(value);
    data_[key] = Bytes(text.begin(), text.end());
  }
  changed_.notify_all();
  return value;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes now;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(key);
    if (it == data_.end() ? expected.empty() : it->second == expected) data_[key] = desired;
    it = data_.find(key);
    if (it != data_.end()) now = it->second;
  }
  changed_.notify_all();
  return now;
}

bool HashStore::erase(const std::string& key) {
  std::lock_guard lock(mu_);
  // No notify: no waiter can be waiting for a key to vanish.
  return data_.erase(key) > 0;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  for (auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  wait_locked(lock, keys, timeout);
}

void HashStore::wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout) {
  auto present = [&] {
    for (auto& k : keys)
      if (!data_.count(k)) return false;
    return true;
  };
  // The predicate form re-checks after every notify and spurious wake-up, and unlocks while asleep.
  if (changed_.wait_for(lock, timeout, present)) return;
  std::string missing;
  for (auto& k : keys)
    if (!data_.count(k)) missing += (missing.empty() ? "'" : ", '") + k + "'";
  NANODDP_FAIL("timed out after {:g} s waiting for store keys {}: a rank may have failed or stalled",
               timeout.count() / 1000.0, missing);
}

}  // namespace nanoddp::dist
