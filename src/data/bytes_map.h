// BytesMap: byte string -> uint32 value, the lookup at the heart of BPE encoding (a vocabulary of
// up to 200k byte strings, probed several times per pre-token) and of the pre-token caches.
//
// Written by hand rather than std::unordered_map<std::string, ...>: that costs a heap node per key
// and a pointer chase per probe, and needs a std::string built from every piece looked up. Here a
// lookup hashes the string_view once and probes a flat slot array (linear probing, kept at most
// half full); keys live back to back in one arena. Only insertion and lookup exist (no erase),
// which is all a vocabulary or a cache that is cleared wholesale needs.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace nanoddp::data {

// 64-bit hash of a byte string: 8-byte words folded through a multiply-xorshift mixer (splitmix64's
// finalizer). Never returns 0, which marks an empty slot.
inline uint64_t hash_bytes(std::string_view s) {
  auto mix = [](uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix(h ^ w);
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = mix(h ^ w ^ 0xff51afd7ed558ccdull);
  }
  return h | 1;
}

class BytesMap {
 public:
  explicit BytesMap(size_t expected_keys = 0) { reserve(expected_keys); }

  // Adds key -> value. Returns false, changing nothing, when the key is already present.
  bool insert(std::string_view key, uint32_t value);
  // The value of `key`, or nullptr.
  const uint32_t* find(std::string_view key) const {
    if (slots_.empty()) return nullptr;
    const uint64_t h = hash_bytes(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return nullptr;
      if (s.hash == h && s.key_len == key.size() && std::memcmp(keys_.data() + s.key_offset, key.data(), key.size()) == 0)
        return &s.value;
    }
  }

  // Calls fn(key, value) for every entry, in no particular order.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& s : slots_)
      if (s.hash != 0) fn(std::string_view(keys_.data() + s.key_offset, s.key_len), s.value);
  }

  size_t size() const { return size_; }
  size_t key_bytes() const { return keys_.size(); }
  void reserve(size_t keys);
  // Forgets every key; keeps the memory.
  void clear();

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty
    uint32_t key_offset = 0;
    uint32_t key_len = 0;
    uint32_t value = 0;
  };
  void grow();

  std::vector<Slot> slots_;  // [capacity], capacity a power of two, at most half full
  size_t mask_ = 0;          // capacity - 1
  size_t size_ = 0;
  std::string keys_;         // all keys back to back; Slot::key_offset indexes it
};

}  // namespace nanoddp::data
