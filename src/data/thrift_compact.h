// Reading Apache Thrift's compact protocol: the encoding of a parquet file's footer (FileMetaData)
// and of its page headers. Only reading, and only what a schema-less walk needs: field headers,
// integers, binary strings, list headers, and skipping any value a caller does not want.
//
// The format, briefly: a struct is a sequence of fields ended by a STOP byte (0). A field header is
// one byte, the field id's delta from the previous field in the high nibble (0: a zigzag varint id
// follows) and the type in the low nibble. Integers are zigzag LEB128 varints, binary is a varint
// length and the bytes, a list header is the size in the high nibble (15: a varint size follows)
// and the element type in the low nibble. A bool field carries its value in its type (1 true, 2 false).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nanoddp::data {

// Compact protocol type ids.
enum CompactType : uint8_t {
  kCtStop = 0, kCtTrue = 1, kCtFalse = 2, kCtByte = 3, kCtI16 = 4, kCtI32 = 5, kCtI64 = 6,
  kCtDouble = 7, kCtBinary = 8, kCtList = 9, kCtSet = 10, kCtMap = 11, kCtStruct = 12,
};

// A cursor over a buffer of compact-protocol bytes. Every read checks the bounds; malformed or
// truncated input throws nanoddp::Error saying what was wrong at which byte (the caller adds the
// file's name).
class CompactReader {
 public:
  CompactReader(const uint8_t* data, size_t size) : p_(data), begin_(data), end_(data + size) {}

  struct Field {
    int16_t id = 0;
    uint8_t type = kCtStop;  // kCtStop: the struct has ended
  };
  // The next field header of the struct being read. Call begin_struct() before a struct's first
  // field (the id deltas start from 0 in every struct) and end_struct() after its STOP.
  Field next_field();
  void begin_struct();
  void end_struct();

  int64_t read_int();  // i8 (one raw byte), i16, i32 or i64 by `type`
  int64_t read_int(uint8_t type);
  std::string read_binary();
  // A list or set header: element type and count (checked against the bytes left, so a corrupt
  // count cannot make a caller allocate gigabytes).
  struct ListHeader {
    uint8_t elem_type = 0;
    int64_t size = 0;
  };
  ListHeader read_list_header();
  // Skips one value of `type` (nested structs, lists and maps included, up to a depth limit).
  void skip(uint8_t type) { skip(type, 0); }

  size_t position() const { return static_cast<size_t>(p_ - begin_); }

 private:
  uint8_t read_byte();
  uint64_t read_varint();
  void skip(uint8_t type, int depth);
  [[noreturn]] void fail(const char* what) const;

  const uint8_t* p_;
  const uint8_t* begin_;
  const uint8_t* end_;
  int16_t last_id_ = 0;
  // The last field ids of the enclosing structs, innermost last; fixed depth (see kMaxDepth).
  static constexpr int kMaxDepth = 32;
  int16_t saved_ids_[kMaxDepth] = {};
  int depth_ = 0;
};

}  // namespace nanoddp::data
