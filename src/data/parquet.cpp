// ParquetTextReader::read_row_group: a column chunk's pages, decompressed and decoded.
//
// A column chunk is a sequence of pages, each a PageHeader (thrift compact) and its bytes: at most
// one dictionary page first, then data pages. A data page v1 is compressed whole and holds, for an
// optional column, the definition levels (a 4-byte length, then RLE/bit-packed hybrid, bit width 1:
// 1 for a value, 0 for a null) and then the non-null values. A data page v2 keeps its levels
// uncompressed before the values (their byte lengths are in the header) and compresses only the
// values. Values are PLAIN (each a 4-byte little-endian length and the bytes) or dictionary indices
// (a byte giving the bit width, then RLE/bit-packed hybrid) into the dictionary page's PLAIN values.
#include "data/parquet.h"

#include <snappy-c.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "data/thrift_compact.h"

namespace nanoddp::data {

namespace {

// Bounds on what one page may ask us to allocate: far above what writers produce (pyarrow and
// polars write pages of about 1 MiB and row groups of at most about a million rows), low enough
// that a corrupt header cannot exhaust memory.
constexpr int64_t kMaxPageBytes = int64_t{256} << 20;
constexpr int64_t kMaxRowGroupRows = int64_t{1} << 22;

enum PageType : int64_t { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };
enum Codec : int64_t { kUncompressed = 0, kSnappy = 1, kZstd = 6 };
enum Encoding : int64_t { kPlain = 0, kPlainDictionary = 2, kRle = 3, kRleDictionary = 8 };

const char* codec_name(int64_t codec) {
  static const char* names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  return codec >= 0 && codec < 8 ? names[codec] : "unknown";
}

const char* encoding_name(int64_t e) {
  static const char* names[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED",
                                "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  return e >= 0 && e < 10 ? names[e] : "unknown";
}

struct Bytes {
  const uint8_t* p = nullptr;
  size_t n = 0;
};

struct PageHeader {
  int64_t type = -1, uncompressed = -1, compressed = -1;
  int64_t num_values = -1, num_nulls = -1, encoding = -1, def_encoding = kRle;
  int64_t def_bytes = 0, rep_bytes = 0;  // v2: the levels' byte lengths
  bool values_compressed = true;         // v2: is_compressed
};

// Reads the fields of DataPageHeader (v1), DictionaryPageHeader or DataPageHeaderV2 into h.
void read_page_subheader(CompactReader& r, int64_t which, PageHeader& h) {
  r.begin_struct();
  for (auto f = r.next_field(); f.type != kCtStop; f = r.next_field()) {
    const bool v2 = which == kDataPageV2;
    if (f.id == 1) h.num_values = r.read_int(f.type);
    else if (v2 && f.id == 2) h.num_nulls = r.read_int(f.type);
    else if (v2 && f.id == 4) h.encoding = r.read_int(f.type);
    else if (!v2 && f.id == 2) h.encoding = r.read_int(f.type);
    else if (which == kDataPage && f.id == 3) h.def_encoding = r.read_int(f.type);
    else if (v2 && f.id == 5) h.def_bytes = r.read_int(f.type);
    else if (v2 && f.id == 6) h.rep_bytes = r.read_int(f.type);
    else if (v2 && f.id == 7) h.values_compressed = f.type == kCtTrue;
    else r.skip(f.type);
  }
  r.end_struct();
}

PageHeader read_page_header(CompactReader& r) {
  PageHeader h;
  r.begin_struct();
  for (auto f = r.next_field(); f.type != kCtStop; f = r.next_field()) {
    if (f.id == 1) h.type = r.read_int(f.type);
    else if (f.id == 2) h.uncompressed = r.read_int(f.type);
    else if (f.id == 3) h.compressed = r.read_int(f.type);
    else if (f.type == kCtStruct && (f.id == 5 || f.id == 7 || f.id == 8)) read_page_subheader(r, h.type, h);
    else r.skip(f.type);
  }
  r.end_struct();
  NANODDP_CHECK(h.compressed >= 0 && h.uncompressed >= 0 && h.uncompressed <= kMaxPageBytes, "a page header with "
                "sizes {} compressed, {} uncompressed (at most {} bytes are read)", h.compressed, h.uncompressed,
                kMaxPageBytes);
  return h;
}

// The `size` bytes `in` decompresses to with `codec`: `in` itself when uncompressed, else `buf`.
Bytes decompress(int64_t codec, Bytes in, int64_t size, std::string& buf) {
  if (codec == kUncompressed) {
    NANODDP_CHECK(static_cast<int64_t>(in.n) == size, "an uncompressed page of {} bytes that claims {}", in.n, size);
    return in;
  }
  buf.resize(static_cast<size_t>(size));
  const auto* src = reinterpret_cast<const char*>(in.p);
  if (codec == kSnappy) {
    size_t n = 0;
    NANODDP_CHECK(snappy_uncompressed_length(src, in.n, &n) == SNAPPY_OK && static_cast<int64_t>(n) == size &&
                      snappy_uncompress(src, in.n, buf.data(), &n) == SNAPPY_OK,
                  "a SNAPPY page that does not decompress to its {} bytes", size);
  } else if (codec == kZstd) {
    // The frame says its size before anything is decompressed: a mismatch is refused first.
    const unsigned long long declared = ZSTD_getFrameContentSize(in.p, in.n);
    NANODDP_CHECK(declared != ZSTD_CONTENTSIZE_ERROR, "a ZSTD page that is not a zstd frame");
    const size_t n = ZSTD_decompress(buf.data(), buf.size(), in.p, in.n);
    NANODDP_CHECK(!ZSTD_isError(n) && static_cast<int64_t>(n) == size, "a ZSTD page that does not decompress to its "
                  "{} bytes ({})", size, ZSTD_isError(n) ? ZSTD_getErrorName(n) : "another size");
  } else {
    NANODDP_FAIL("pages compressed with {}, which nanoddp does not read (it reads uncompressed, SNAPPY and ZSTD)"
                 "; rewrite the file with one of those, e.g. pyarrow's compression=\"zstd\"", codec_name(codec));
  }
  return {reinterpret_cast<const uint8_t*>(buf.data()), buf.size()};
}

// Appends `count` values of the RLE/bit-packed hybrid encoding at `in` (bit width `width`) to
// `out`; advances `in` past what it read. A run is a varint header: (n << 1) | 1 is n groups of 8
// bit-packed values (n * width bytes, least significant bit first; the last group may be padding),
// n << 1 is one value (ceil(width / 8) bytes, little-endian) repeated n times.
void decode_hybrid(Bytes& in, int width, int64_t count, std::vector<uint32_t>& out) {
  NANODDP_CHECK(width >= 0 && width <= 32, "a bit width of {} (at most 32)", width);
  const uint8_t* p = in.p;
  const uint8_t* end = in.p + in.n;
  int64_t left = count;
  while (left > 0) {
    uint64_t header = 0;
    for (int shift = 0;; shift += 7) {
      NANODDP_CHECK(p < end && shift < 64, "levels or indices cut short ({} of {} values missing)", left, count);
      header |= static_cast<uint64_t>(*p & 0x7f) << shift;
      if ((*p++ & 0x80) == 0) break;
    }
    if (header & 1) {
      const uint64_t groups = header >> 1;
      // Width 0 (a dictionary of one value) packs any number of values into no bytes.
      NANODDP_CHECK(width == 0 || groups <= static_cast<uint64_t>(end - p) / width,
                    "a bit-packed run longer than its page");
      const int64_t n = groups >= static_cast<uint64_t>(left + 7) / 8 ? left : static_cast<int64_t>(groups * 8);
      for (int64_t i = 0; i < n; i++) {
        uint64_t v = 0;
        for (int b = 0; b < width; b++) {
          const uint64_t bit = static_cast<uint64_t>(i) * width + b;
          v |= static_cast<uint64_t>((p[bit >> 3] >> (bit & 7)) & 1) << b;
        }
        out.push_back(static_cast<uint32_t>(v));
      }
      p += groups * width;
      left -= n;
    } else {
      const int bytes = (width + 7) / 8;
      NANODDP_CHECK(end - p >= bytes, "an RLE run cut short");
      uint32_t v = 0;
      for (int b = 0; b < bytes; b++) v |= static_cast<uint32_t>(p[b]) << (8 * b);
      p += bytes;
      const int64_t n = static_cast<int64_t>(std::min<uint64_t>(header >> 1, static_cast<uint64_t>(left)));
      out.insert(out.end(), static_cast<size_t>(n), v);
      left -= n;
    }
  }
  in = {p, static_cast<size_t>(end - p)};
}

// `count` PLAIN byte arrays from `in`, appended to `out`.
void decode_plain(Bytes in, int64_t count, std::vector<std::string>& out) {
  size_t pos = 0;
  for (int64_t i = 0; i < count; i++) {
    NANODDP_CHECK(in.n - pos >= 4, "PLAIN values cut short ({} of {})", i, count);
    const uint32_t len = in.p[pos] | in.p[pos + 1] << 8 | in.p[pos + 2] << 16 | static_cast<uint32_t>(in.p[pos + 3]) << 24;
    pos += 4;
    NANODDP_CHECK(len <= in.n - pos, "a PLAIN value of {} bytes beyond its page", len);
    out.emplace_back(reinterpret_cast<const char*>(in.p + pos), len);
    pos += len;
  }
}

// `count` values of encoding `encoding` from `in`, appended to `out`.
void decode_values(Bytes in, int64_t encoding, int64_t count, const std::vector<std::string>* dict,
                   std::vector<std::string>& out) {
  if (encoding == kPlain) return decode_plain(in, count, out);
  NANODDP_CHECK(encoding == kPlainDictionary || encoding == kRleDictionary, "values encoded as {}, which nanoddp "
                "does not read (it reads PLAIN and dictionary pages); rewrite the file with those, e.g. pyarrow's "
                "default encodings", encoding_name(encoding));
  NANODDP_CHECK(dict != nullptr, "a dictionary-encoded page without a dictionary page before it");
  NANODDP_CHECK(in.n >= 1 || count == 0, "dictionary indices without their bit width");
  if (count == 0) return;
  const int width = in.p[0];
  in = {in.p + 1, in.n - 1};
  std::vector<uint32_t> index;
  index.reserve(static_cast<size_t>(count));
  decode_hybrid(in, width, count, index);
  for (uint32_t i : index) {
    NANODDP_CHECK(i < dict->size(), "dictionary index {} beyond the dictionary's {} values", i, dict->size());
    out.push_back((*dict)[i]);
  }
}

}  // namespace

namespace {

// The state of one column chunk being decoded.
struct ChunkDecoder {
  int64_t codec = 0;
  int max_def = 0;
  std::vector<std::string> dict;
  bool has_dict = false;
  std::string buf;                 // decompressed page
  std::vector<uint32_t> levels;    // definition levels of the page
  std::vector<std::string> values; // non-null values of the page
  std::vector<std::optional<std::string>>* out = nullptr;

  // Spreads `values` over the rows by `levels` (all rows when the column is required).
  void emit(int64_t num_values) {
    if (max_def == 0) {
      NANODDP_CHECK(static_cast<int64_t>(values.size()) == num_values, "a page of {} values holding {}", num_values,
                    values.size());
      for (auto& v : values) out->emplace_back(std::move(v));
      return;
    }
    size_t next = 0;
    for (uint32_t level : levels) {
      if (level == 0) out->emplace_back(std::nullopt);
      else out->emplace_back(std::move(values[next++]));
    }
  }

  // Definition levels of `n` values at `in` (advanced past them); the number of non-null values.
  int64_t read_levels(Bytes& in, int64_t n) {
    levels.clear();
    if (max_def == 0) return n;
    decode_hybrid(in, 1, n, levels);
    int64_t present = 0;
    for (uint32_t l : levels) {
      NANODDP_CHECK(l <= 1, "a definition level of {} in a column whose levels are 0 and 1", l);
      present += l;
    }
    return present;
  }

  void data_page_v1(const PageHeader& h, Bytes page) {
    Bytes in = decompress(codec, page, h.uncompressed, buf);
    int64_t present = h.num_values;
    if (max_def > 0) {
      NANODDP_CHECK(h.def_encoding == kRle, "definition levels encoded as {}, which nanoddp does not read (it reads "
                    "RLE)", encoding_name(h.def_encoding));
      NANODDP_CHECK(in.n >= 4, "a data page cut short before its definition levels");
      const uint32_t len = in.p[0] | in.p[1] << 8 | in.p[2] << 16 | static_cast<uint32_t>(in.p[3]) << 24;
      NANODDP_CHECK(len <= in.n - 4, "definition levels of {} bytes in a page of {}", len, in.n);
      Bytes lv{in.p + 4, len};
      present = read_levels(lv, h.num_values);
      in = {in.p + 4 + len, in.n - 4 - len};
    }
    values.clear();
    decode_values(in, h.encoding, present, has_dict ? &dict : nullptr, values);
    emit(h.num_values);
  }

  void data_page_v2(const PageHeader& h, Bytes page) {
    NANODDP_CHECK(h.rep_bytes == 0 && h.def_bytes >= 0 && static_cast<uint64_t>(h.def_bytes) <= page.n,
                  "a data page v2 with {} bytes of repetition and {} of definition levels in {}", h.rep_bytes,
                  h.def_bytes, page.n);
    Bytes lv{page.p, static_cast<size_t>(h.def_bytes)};
    const int64_t present = read_levels(lv, h.num_values);
    NANODDP_CHECK(h.num_nulls < 0 || h.num_nulls == h.num_values - present, "a data page v2 with {} nulls whose "
                  "levels say {}", h.num_nulls, h.num_values - present);
    Bytes in{page.p + h.def_bytes, page.n - static_cast<size_t>(h.def_bytes)};
    NANODDP_CHECK(h.uncompressed >= h.def_bytes, "a data page v2 smaller than its levels");
    if (h.values_compressed) in = decompress(codec, in, h.uncompressed - h.def_bytes, buf);
    values.clear();
    decode_values(in, h.encoding, present, has_dict ? &dict : nullptr, values);
    emit(h.num_values);
  }

  void dictionary_page(const PageHeader& h, Bytes page) {
    NANODDP_CHECK(!has_dict, "a second dictionary page in one column chunk");
    NANODDP_CHECK(h.encoding == kPlain || h.encoding == kPlainDictionary, "a dictionary page encoded as {}",
                  encoding_name(h.encoding));
    NANODDP_CHECK(h.num_values >= 0, "a dictionary page of {} values", h.num_values);
    decode_plain(decompress(codec, page, h.uncompressed, buf), h.num_values, dict);
    has_dict = true;
  }
};

}  // namespace

std::vector<std::optional<std::string>> ParquetTextReader::read_row_group(size_t g) {
  NANODDP_ASSERT(g < chunks_.size());
  const Chunk& c = chunks_[g];
  std::vector<std::optional<std::string>> out;
  try {
    NANODDP_CHECK(c.rows <= kMaxRowGroupRows, "a row group of {} rows (nanoddp reads at most {} at a time); rewrite "
                  "the file with smaller row groups", c.rows, kMaxRowGroupRows);
    std::vector<uint8_t> bytes(static_cast<size_t>(c.bytes));
    in_.clear();
    in_.seekg(c.start);
    in_.read(reinterpret_cast<char*>(bytes.data()), c.bytes);
    NANODDP_CHECK(in_, "reading {} bytes at {} failed: {}", c.bytes, c.start, std::strerror(errno));
    out.reserve(static_cast<size_t>(std::min<int64_t>(c.rows, 1 << 16)));  // grows as pages prove the rows exist
    ChunkDecoder d;
    d.codec = c.codec;
    d.max_def = max_def_;
    d.out = &out;
    size_t pos = 0;
    while (static_cast<int64_t>(out.size()) < c.num_values) {
      NANODDP_CHECK(pos < bytes.size(), "the column chunk ends after {} of its {} values", out.size(), c.num_values);
      CompactReader r(bytes.data() + pos, bytes.size() - pos);
      const PageHeader h = read_page_header(r);
      pos += r.position();
      NANODDP_CHECK(static_cast<uint64_t>(h.compressed) <= bytes.size() - pos, "a page of {} bytes beyond the end of "
                    "its column chunk", h.compressed);
      const Bytes page{bytes.data() + pos, static_cast<size_t>(h.compressed)};
      pos += page.n;
      if (h.type == kDictionaryPage) {
        d.dictionary_page(h, page);
        pages_.dictionary++;
        continue;
      }
      if (h.type != kDataPage && h.type != kDataPageV2) continue;  // an index page: nothing to read
      NANODDP_CHECK(h.num_values >= 0 && h.num_values <= c.num_values - static_cast<int64_t>(out.size()), "a page of "
                    "{} values where {} are left in the column chunk", h.num_values, c.num_values - out.size());
      if (h.type == kDataPage) d.data_page_v1(h, page);
      else d.data_page_v2(h, page);
      (h.type == kDataPage ? pages_.v1 : pages_.v2)++;
      (h.encoding == kPlain ? pages_.plain : pages_.dictionary_encoded)++;
    }
  } catch (const Error& e) {
    NANODDP_FAIL("cannot read parquet file {}, row group {} of {}: {}", path_, g + 1, chunks_.size(), e.what());
  }
  return out;
}

}  // namespace nanoddp::data
