// The wire format between TcpStore clients and the TcpStoreServer (rendezvous/tcp_store.h).
//
// Every message, both ways, is a frame:
//   u32 payload length (big-endian) | payload
// and a payload is a sequence of fields: u8 opcodes/flags, i64 integers (big-endian), and byte
// strings written as u32 length + bytes. Requests start with an Op; replies with a Status.
//
// A connection opens with kHello (magic, protocol version, token); the server answers kOk or closes
// the connection after an error reply. Frames larger than kMaxFrameBytes are refused on both sides,
// and before its Hello has succeeded a peer may send no frame larger than kMaxHelloFrameBytes, so a
// confused or hostile peer cannot make the server allocate without bound (see Note [store limits]
// in tcp_store_server.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanoddp::dist::wire {

using Bytes = std::vector<uint8_t>;

// The first field a client sends, so the server can tell a stray connection (a port scan, another
// program) from a client and answer it with a clear error.
inline constexpr std::string_view kMagic = "nanoddp-store";
// Raised on any change to the wire format: the server refuses other versions with a message that
// says to use the same build everywhere.
inline constexpr int64_t kVersion = 1;

// Limits, enforced by the client before sending and by the server on receipt.
inline constexpr size_t kMaxKeyBytes = 4 << 10;             // 4 KiB per key
inline constexpr size_t kMaxValueBytes = 16 << 20;          // 16 MiB per value
inline constexpr size_t kMaxKeysPerRequest = 1 << 16;
// A CompareSet frame carries two values; the extra 1 MiB covers its key and the field headers.
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes * 2 + (1 << 20);
// NANODDP_STORE_TOKEN, as the server reads it from a Hello.
inline constexpr size_t kMaxTokenBytes = 4 << 10;
// The largest frame a peer may send before it has authenticated. A Hello is at most
// 1 (op) + 4 + 64 (magic field, as the server reads it) + 8 (version) + 4 + kMaxTokenBytes = 4177
// bytes; 8 KiB is the next power of two, so every token the server accepts still fits, while a
// stranger costs the server at most this much buffer instead of kMaxFrameBytes (33 MiB).
inline constexpr size_t kMaxHelloFrameBytes = 8 << 10;
inline constexpr size_t kMaxMagicBytes = 64;
static_assert(1 + 4 + kMaxMagicBytes + 8 + 4 + kMaxTokenBytes <= kMaxHelloFrameBytes);

enum class Op : uint8_t {
  Hello = 1,       // magic, version, token                -> Ok | Error
  Set = 2,         // key, value                           -> Ok
  Get = 3,         // key, timeout_ms                      -> Value value | Timeout
  Add = 4,         // key, delta                           -> Int value | Error (not an integer)
  CompareSet = 5,  // key, expected, desired               -> Value value
  Erase = 6,       // key                                  -> Int existed
  Check = 7,       // n, keys...                           -> Int all_present
  Wait = 8,        // n, keys..., timeout_ms               -> Ok | Timeout missing_n, missing...
};

// The first byte of every reply payload.
enum class Status : uint8_t { Ok = 0, Value = 1, Int = 2, Timeout = 3, Error = 4 };

// Builds one frame.
class Writer {
 public:
  Writer() { buf_.resize(4); }  // room for the length prefix
  Writer& u8(uint8_t v);
  Writer& i64(int64_t v);
  Writer& bytes(const uint8_t* data, size_t n);
  Writer& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }
  Writer& str(std::string_view s) { return bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  // The finished frame: the length prefix filled in. The writer is left empty.
  Bytes take();

 private:
  Bytes buf_;
};

// Reads the fields of one payload (without its length prefix); throws nanoddp::Error on a
// truncated or malformed payload.
class Reader {
 public:
  Reader(const uint8_t* data, size_t n) : p_(data), end_(data + n) {}
  uint8_t u8();
  int64_t i64();
  // A field longer than `limit` is refused before anything is allocated for it.
  Bytes bytes(size_t limit);
  std::string str(size_t limit);
  bool done() const { return p_ == end_; }

 private:
  void need(size_t n);
  const uint8_t* p_;
  const uint8_t* end_;
};

// Frame length prefix helpers.
uint32_t read_u32_be(const uint8_t* p);
void write_u32_be(uint8_t* p, uint32_t v);

}  // namespace nanoddp::dist::wire
