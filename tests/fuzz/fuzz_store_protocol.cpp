// Fuzzes the rendezvous store's wire format (rendezvous/store_protocol.h) with what the server reads
// from a connection: a byte stream cut into frames (u32 big-endian length, payload). Each payload is
// decoded as a request, field by field in the layout store_protocol.h gives for its Op, with the
// limits the server applies, and also as a reply the way a client reads one.
//
// Besides "only nanoddp::Error", one property: a request whose fields account for every byte of
// its payload must be written back by wire::Writer into exactly the frame that was read. That ties
// the encoder to the decoder, so a change to one that the other misses shows up here first.
#include <optional>
#include <vector>

#include "fuzz_support.h"
#include "rendezvous/store_protocol.h"

namespace {

namespace wire = nanoddp::dist::wire;
using nanoddp::fuzz::expect_only_errors;
using nanoddp::fuzz::require;

// One decoded field, kept so the request can be encoded again.
struct Field {
  enum Kind { U8, I64, Bytes } kind;
  int64_t number = 0;
  wire::Bytes bytes;
};

// Reads the fields of a key count followed by that many keys (Check, Wait, and a Timeout reply).
void read_keys(wire::Reader& r, std::vector<Field>& fields) {
  int64_t n = r.i64();
  fields.push_back({Field::I64, n, {}});
  // The server refuses larger counts before reading a key; a bogus count must never size anything.
  NANODDP_CHECK(n >= 0 && size_t(n) <= wire::kMaxKeysPerRequest, "too many keys ({})", n);
  for (int64_t i = 0; i < n; i++) fields.push_back({Field::Bytes, 0, r.bytes(wire::kMaxKeyBytes)});
}

// Decodes one request payload; nullopt for an opcode the server does not know (it answers those
// with an error and closes).
std::optional<std::vector<Field>> read_request(wire::Reader& r) {
  std::vector<Field> f;
  auto op = wire::Op(r.u8());
  f.push_back({Field::U8, int64_t(op), {}});
  auto key = [&] { f.push_back({Field::Bytes, 0, r.bytes(wire::kMaxKeyBytes)}); };
  auto value = [&] { f.push_back({Field::Bytes, 0, r.bytes(wire::kMaxValueBytes)}); };
  auto number = [&] { f.push_back({Field::I64, r.i64(), {}}); };
  switch (op) {
    case wire::Op::Hello:
      f.push_back({Field::Bytes, 0, r.bytes(wire::kMaxMagicBytes)});
      number();
      f.push_back({Field::Bytes, 0, r.bytes(wire::kMaxTokenBytes)});
      break;
    case wire::Op::Set: key(); value(); break;
    case wire::Op::Get: key(); number(); break;
    case wire::Op::Add: key(); number(); break;
    case wire::Op::CompareSet: key(); value(); value(); break;
    case wire::Op::Erase: key(); break;
    case wire::Op::Check: read_keys(r, f); break;
    case wire::Op::Wait: read_keys(r, f); number(); break;
    default: return std::nullopt;
  }
  return f;
}

// Decodes one reply payload as TcpStore does for the request it sent (any of them, here).
void read_reply(wire::Reader& r) {
  std::vector<Field> unused;
  switch (wire::Status(r.u8())) {
    case wire::Status::Ok: break;
    case wire::Status::Value: r.bytes(wire::kMaxValueBytes); break;
    case wire::Status::Int: r.i64(); break;
    case wire::Status::Timeout: read_keys(r, unused); break;
    case wire::Status::Error: r.str(wire::kMaxFrameBytes); break;
    default: break;  // the client reports an unexpected status; nothing more is read
  }
}

wire::Bytes encode(const std::vector<Field>& fields) {
  wire::Writer w;
  for (const Field& f : fields) {
    if (f.kind == Field::U8) w.u8(uint8_t(f.number));
    if (f.kind == Field::I64) w.i64(f.number);
    if (f.kind == Field::Bytes) w.bytes(f.bytes);
  }
  return w.take();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t pos = 0;
  // Frames back to back, as pipelined on one connection; a frame the server would refuse for its
  // length, or one cut short, ends the stream.
  while (size - pos >= 4) {
    const uint32_t len = wire::read_u32_be(data + pos);
    if (len > wire::kMaxFrameBytes || size - pos - 4 < len) break;
    const uint8_t* frame = data + pos;
    const uint8_t* payload = frame + 4;
    expect_only_errors([&] {
      wire::Reader r(payload, len);
      auto fields = read_request(r);
      if (fields && r.done())
        require(encode(*fields) == wire::Bytes(frame, payload + len), "a decoded request re-encodes to other bytes");
    });
    expect_only_errors([&] {
      wire::Reader r(payload, len);
      read_reply(r);
    });
    pos += 4 + len;
  }
  return 0;
}
