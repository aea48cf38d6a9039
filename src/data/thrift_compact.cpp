#include "data/thrift_compact.h"

#include "core/error.h"

namespace nanoddp::data {

namespace {

// In a list or map a bool is one byte (1 or 2), not a field type that carries the value.
uint8_t element_type(uint8_t type) {
  return type == kCtTrue || type == kCtFalse ? static_cast<uint8_t>(kCtByte) : type;
}

}  // namespace

void CompactReader::fail(const char* what) const {
  NANODDP_FAIL("{} at byte {} of {} of thrift metadata", what, position(), end_ - begin_);
}

uint8_t CompactReader::read_byte() {
  if (p_ >= end_) fail("metadata cut short");
  return *p_++;
}

uint64_t CompactReader::read_varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const uint8_t b = read_byte();
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  fail("a varint longer than 10 bytes");
}

int64_t CompactReader::read_int() {
  const uint64_t z = read_varint();
  return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);  // zigzag
}

int64_t CompactReader::read_int(uint8_t type) {
  switch (type) {
    case kCtByte:
      return static_cast<int8_t>(read_byte());
    case kCtI16:
    case kCtI32:
    case kCtI64:
      return read_int();
    default:
      fail("an integer field of a non-integer type");
  }
}

std::string CompactReader::read_binary() {
  const uint64_t n = read_varint();
  if (n > static_cast<uint64_t>(end_ - p_)) fail("a string longer than the metadata");
  std::string s(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return s;
}

CompactReader::ListHeader CompactReader::read_list_header() {
  const uint8_t b = read_byte();
  ListHeader h;
  h.elem_type = b & 0x0f;
  h.size = b >> 4;
  if (h.size == 15) {
    const uint64_t n = read_varint();
    // Every element takes at least one byte (bools and bytes exactly one).
    if (n > static_cast<uint64_t>(end_ - p_)) fail("a list longer than the metadata");
    h.size = static_cast<int64_t>(n);
  }
  return h;
}

void CompactReader::begin_struct() {
  if (depth_ >= kMaxDepth) fail("structs nested too deeply");
  saved_ids_[depth_++] = last_id_;
  last_id_ = 0;
}

void CompactReader::end_struct() {
  if (depth_ > 0) last_id_ = saved_ids_[--depth_];
}

CompactReader::Field CompactReader::next_field() {
  const uint8_t b = read_byte();
  Field f;
  f.type = b & 0x0f;
  if (f.type == kCtStop) return f;
  const int delta = b >> 4;
  if (delta != 0) {
    f.id = static_cast<int16_t>(last_id_ + delta);
  } else {
    const int64_t id = read_int();
    if (id < INT16_MIN || id > INT16_MAX) fail("a field id out of range");
    f.id = static_cast<int16_t>(id);
  }
  last_id_ = f.id;
  return f;
}

void CompactReader::skip(uint8_t type, int depth) {
  if (depth > kMaxDepth) fail("values nested too deeply");
  switch (type) {
    case kCtTrue:
    case kCtFalse:
      return;  // a bool field's value is its type; a bool list element is a byte (see kCtList)
    case kCtByte:
      read_byte();
      return;
    case kCtI16:
    case kCtI32:
    case kCtI64:
      read_varint();
      return;
    case kCtDouble:
      if (end_ - p_ < 8) fail("metadata cut short");
      p_ += 8;
      return;
    case kCtBinary:
      read_binary();
      return;
    case kCtList:
    case kCtSet: {
      const ListHeader h = read_list_header();
      // In a list a bool is one byte, not a field type.
      for (int64_t i = 0; i < h.size; i++) skip(element_type(h.elem_type), depth + 1);
      return;
    }
    case kCtMap: {
      const uint64_t n = read_varint();
      if (n > static_cast<uint64_t>(end_ - p_)) fail("a map longer than the metadata");
      if (n == 0) return;
      const uint8_t kv = read_byte();
      for (uint64_t i = 0; i < n; i++) {
        skip(element_type(static_cast<uint8_t>(kv >> 4)), depth + 1);
        skip(element_type(kv & 0x0f), depth + 1);
      }
      return;
    }
    case kCtStruct:
      begin_struct();
      for (Field f = next_field(); f.type != kCtStop; f = next_field()) skip(f.type, depth + 1);
      end_struct();
      return;
    default:
      fail("an unknown field type");
  }
}

}  // namespace nanoddp::data
