#include "rendezvous/store_protocol.h"

#include <algorithm>

#include "core/error.h"

namespace nanoddp::dist::wire {

// Big-endian (network order) byte by byte, so hosts of either endianness agree and no alignment is
// assumed.
uint32_t read_u32_be(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

void write_u32_be(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}

Writer& Writer::u8(uint8_t v) {
  buf_.push_back(v);
  return *this;
}

Writer& Writer::i64(int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int shift = 56; shift >= 0; shift -= 8) buf_.push_back(uint8_t(u >> shift));
  return *this;
}

Writer& Writer::bytes(const uint8_t* data, size_t n) {
  size_t at = buf_.size();
  buf_.resize(at + 4 + n);
  write_u32_be(buf_.data() + at, static_cast<uint32_t>(n));
  if (n > 0) std::copy_n(data, n, buf_.data() + at + 4);
  return *this;
}

Bytes Writer::take() {
  write_u32_be(buf_.data(), static_cast<uint32_t>(buf_.size() - 4));
  Bytes out;
  out.swap(buf_);
  // Ready for the next frame: the writer can be reused.
  buf_.resize(4);
  return out;
}

void Reader::need(size_t n) {
  // A payload shorter than its fields say: the peer does not speak this protocol, or not this version.
  NANODDP_CHECK(static_cast<size_t>(end_ - p_) >= n,
                "malformed rendezvous store message (truncated field): is another program using this port?");
}

uint8_t Reader::u8() {
  need(1);
  return *p_++;
}

int64_t Reader::i64() {
  need(8);
  uint64_t u = 0;
  for (int i = 0; i < 8; i++) u = (u << 8) | p_[i];
  p_ += 8;
  return static_cast<int64_t>(u);
}

Bytes Reader::bytes(size_t limit) {
  need(4);
  uint32_t n = read_u32_be(p_);
  p_ += 4;
  // Before need() and the copy: a length claiming gigabytes is refused, not allocated.
  NANODDP_CHECK(n <= limit, "rendezvous store message field of {} bytes exceeds the limit of {} bytes", n, limit);
  need(n);
  Bytes out(p_, p_ + n);
  p_ += n;
  return out;
}

std::string Reader::str(size_t limit) {
  Bytes b = bytes(limit);
  return std::string(b.begin(), b.end());
}

}  // namespace nanoddp::dist::wire
