#include "data/bytes_map.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace nanoddp::data {

void BytesMap::reserve(size_t keys) {
  const size_t want = std::bit_ceil(std::max<size_t>(16, keys * 2));
  if (want <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(want, Slot{});
  mask_ = want - 1;
  for (const Slot& s : old) {
    if (s.hash == 0) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].hash != 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void BytesMap::grow() { reserve(std::max<size_t>(16, slots_.size())); }

bool BytesMap::insert(std::string_view key, uint32_t value) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  NANODDP_CHECK(keys_.size() + key.size() <= UINT32_MAX, "byte-string table over 4 GiB of keys");
  const uint64_t h = hash_bytes(key);
  size_t i = h & mask_;
  for (;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.hash == 0) break;
    if (s.hash == h && s.key_len == key.size() && std::memcmp(keys_.data() + s.key_offset, key.data(), key.size()) == 0)
      return false;
  }
  slots_[i] = Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()), value};
  keys_.append(key);
  size_++;
  return true;
}

void BytesMap::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  keys_.clear();
  size_ = 0;
}

}  // namespace nanoddp::data
