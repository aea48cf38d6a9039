#include "rendezvous/prefix_store.h"

namespace nanoddp::dist {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  set_timeout(inner_->timeout());
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { inner_->set(full(key), value); }

// get() waits with this store's timeout, not the inner one's.
Bytes PrefixStore::get(const std::string& key) {
  inner_->wait({full(key)}, timeout());
  return inner_->get(full(key));
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return inner_->add(full(key), delta); }

Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return inner_->compare_set(full(key), expected, desired);
}

bool PrefixStore::erase(const std::string& key) { return inner_->erase(full(key)); }

bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(full(keys)); }

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  inner_->wait(full(keys), timeout);
}

}  // namespace nanoddp::dist
