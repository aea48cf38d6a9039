#include "data/input_kind.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace nanoddp::data {

namespace {

struct Magic {
  std::string_view bytes;
  size_t offset;
  const char* what;
};

// Formats a corpus (or a mistaken input) commonly comes in; tar's magic is at byte 257.
constexpr Magic kMagics[] = {
    {"\x1f\x8b", 0, "a gzip file; decompress it first (gunzip)"},
    {"\x28\xb5\x2f\xfd", 0, "a zstd file; decompress it first (unzstd)"},
    {"BZh", 0, "a bzip2 file; decompress it first (bunzip2)"},
    {"\xfd" "7zXZ", 0, "an xz file; decompress it first (unxz)"},
    {"PK\x03\x04", 0, "a zip archive; unpack it first (unzip)"},
    {"7z\xbc\xaf\x27\x1c", 0, "a 7z archive; unpack it first"},
    {"ustar", 257, "a tar archive; unpack it first (tar xf)"},
    {"\x04\x22\x4d\x18", 0, "an lz4 file; decompress it first (unlz4)"},
    {"%PDF-", 0, "a PDF document; extract its text first (pdftotext)"},
    {"ARROW1", 0, "an Arrow file; write its text column as parquet or JSONL first"},
    {"\x93NUMPY", 0, "a NumPy array"},
    {"\x7f" "ELF", 0, "a program (ELF)"},
    {"\x89PNG", 0, "a PNG image"},
    {"\xff\xd8\xff", 0, "a JPEG image"},
};

// The length of the valid UTF-8 sequence at s[i], or 0 when it is not one. A sequence cut off by
// the end of `s` counts as valid (the sample may end inside a character).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 && b >= 0xc2 ? 2 : (b >> 4) == 0xe ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
  for (size_t k = 1; k < n; k++) {
    if (i + k >= s.size()) return s.size() - i;
    if ((static_cast<uint8_t>(s[i + k]) & 0xc0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::string binary_kind(std::string_view head) {
  for (const Magic& m : kMagics)
    if (head.size() >= m.offset + m.bytes.size() && head.substr(m.offset, m.bytes.size()) == m.bytes) return m.what;
  if (head.find('\0') != std::string_view::npos)
    return "binary (it holds NUL bytes, which text never does; UTF-16 text has them too: convert it to UTF-8)";
  size_t invalid = 0;
  for (size_t i = 0; i < head.size();) {
    const size_t n = utf8_length(head, i);
    invalid += n == 0;
    i += n == 0 ? 1 : n;
  }
  // 30%: see Note [binary input] in input_kind.h.
  if (invalid * 10 > head.size() * 3)
    return "binary (" + std::to_string(invalid * 100 / head.size()) + "% of its first bytes are not UTF-8)";
  return "";
}

InputKind input_kind(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NANODDP_CHECK(in.is_open(), "cannot read {}: {}", path, std::strerror(errno));
  std::string head(64 << 10, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  NANODDP_CHECK(!in.bad(), "cannot read {}: {}", path, std::strerror(errno));
  head.resize(static_cast<size_t>(in.gcount()));
  if (head.starts_with("PAR1")) return InputKind::kParquet;
  const std::string what = binary_kind(head);
  NANODDP_CHECK(what.empty(), "input {} is not text: it looks like {}. data prepare and tokenizer train read text "
                "files, JSONL files with a \"text\" field, and parquet files with a \"text\" column", path, what);
  return InputKind::kText;
}

}  // namespace nanoddp::data
