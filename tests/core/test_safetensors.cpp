// core/safetensors: what the writer puts on disk (every dtype, empty, scalar and large tensors,
// metadata) comes back byte for byte, and a damaged or hostile file is one nanoddp::Error naming the
// file, never a crash, a read past the mapping or a mapping left behind.
#include "core/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_util.h"

namespace nanoddp {
namespace {

// A tensor whose bytes are a function of (seed, index), so two tensors never hold the same bytes
// and a swapped or shifted extent shows.
Tensor patterned(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); i++) p[i] = static_cast<unsigned char>((i * 2654435761u + seed * 40503u) >> 7);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// A file in the format's layout with this header text and data section, written as is.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
}

// Whether /proc/self/maps lists `path`: a rejected file must not stay mapped.
bool is_mapped(const std::string& path) {
  return testing::read_file("/proc/self/maps").find(path) != std::string::npos;
}

TEST(Safetensors, EveryDtypeRoundTripsByteForByte) {
  testing::ScratchDir dir("safetensors_dtypes");
  const DType all[] = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::U16,
                       DType::U32, DType::U8,   DType::F64, DType::I64};
  std::vector<std::pair<std::string, Tensor>> written;
  SafetensorsWriter w;
  uint32_t seed = 1;
  for (DType d : all) {
    // Odd sizes: each tensor's byte count is not a multiple of 8, so later offsets are unaligned.
    written.emplace_back(std::string(dtype_name(d)), patterned({3, 5}, d, seed++));
    w.add(written.back().first, written.back().second);
  }
  w.write(dir.str("all.safetensors"));
  SafetensorsFile f(dir.str("all.safetensors"));
  EXPECT_EQ(f.names().size(), written.size());
  for (auto& [name, t] : written) {
    EXPECT_EQ(f.dtype(name), t.dtype()) << name;
    EXPECT_EQ(f.shape(name), t.shape()) << name;
    EXPECT_TRUE(same_bytes(f.read(name), t)) << name;
  }
}

// Shapes at the edges: no elements, no dims (a scalar), and a tensor larger than any buffer a
// reader might copy through (12 MiB).
TEST(Safetensors, EmptyScalarAndLargeTensorsRoundTrip) {
  testing::ScratchDir dir("safetensors_shapes");
  const std::vector<std::pair<std::string, Tensor>> written = {{"empty", patterned({0}, DType::F32, 1)},
                                                               {"empty_rows", patterned({0, 7}, DType::BF16, 2)},
                                                               {"scalar", patterned({}, DType::I64, 3)},
                                                               {"large", patterned({3 << 20}, DType::F32, 4)},
                                                               {"after_large", patterned({2, 3}, DType::U8, 5)}};
  SafetensorsWriter w;
  for (auto& [name, t] : written) w.add(name, t);
  w.write(dir.str("shapes.safetensors"));
  SafetensorsFile f(dir.str("shapes.safetensors"));
  for (auto& [name, t] : written) {
    EXPECT_EQ(f.shape(name), t.shape()) << name;
    EXPECT_TRUE(same_bytes(f.read(name), t)) << name;
  }
  // read_into fills a tensor of another shape with the same number of elements.
  Tensor flat = Tensor::empty({6}, DType::U8);
  f.read_into("after_large", flat);
  EXPECT_EQ(std::memcmp(flat.raw(), written.back().second.raw(), 6), 0);
}

TEST(Safetensors, MetadataRoundTripsAndAFileMayHoldNoTensors) {
  testing::ScratchDir dir("safetensors_meta");
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("quotes \"and\\ slashes", "line\nbreak, tab\t and ünïcödé");
  w.set_metadata("empty", "");
  w.write(dir.str("meta.safetensors"));
  SafetensorsFile f(dir.str("meta.safetensors"));
  EXPECT_TRUE(f.names().empty());
  const std::map<std::string, std::string> want = {{"format", "pt"},
                                                   {"quotes \"and\\ slashes", "line\nbreak, tab\t and ünïcödé"},
                                                   {"empty", ""}};
  EXPECT_EQ(f.metadata(), want);
}

// What other readers rely on: an 8-byte length, a JSON header whose data section starts 8-byte
// aligned, the format's upper-case dtype names, and offsets that tile the data section in order.
TEST(Safetensors, WrittenLayoutIsTheFormats) {
  testing::ScratchDir dir("safetensors_layout");
  SafetensorsWriter w;
  w.add("a", patterned({3}, DType::BF16, 1));
  w.add("b", patterned({2, 2}, DType::F64, 2));
  w.write(dir.str("l.safetensors"));
  const std::string bytes = testing::read_file(dir.str("l.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["a"]["dtype"], "BF16");
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 6}));
  EXPECT_EQ(header["b"]["dtype"], "F64");
  EXPECT_EQ(header["b"]["shape"], nlohmann::json({2, 2}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({6, 38}));
  EXPECT_EQ(bytes.size(), 8 + n + 38);
}

TEST(Safetensors, MisuseOfAGoodFileNamesTheFileAndTensor) {
  testing::ScratchDir dir("safetensors_misuse");
  const std::string path = dir.str("m.safetensors");
  SafetensorsWriter w;
  w.add("w", patterned({2, 3}, DType::F32, 1));
  w.write(path);
  SafetensorsFile f(path);
  NANODDP_EXPECT_ERROR(f.read("nope"), path, "no tensor named 'nope'");
  NANODDP_EXPECT_ERROR(f.shape("nope"), path, "'nope'");
  NANODDP_EXPECT_ERROR(f.read_into("w", Tensor::empty({7}, DType::F32)), path, "'w'", "[2, 3]", "[7]");
  NANODDP_EXPECT_ERROR(f.read_into("w", Tensor::empty({2, 3}, DType::BF16)), path, "'w'", "bf16");
  NANODDP_EXPECT_ERROR(w.write(dir.str("no/such/dir/x.safetensors")), "cannot write",
                       dir.str("no/such/dir/x.safetensors"));
}

// One damaged file per case: each is rejected when opened with an Error naming the file and
// saying what is wrong, and leaves no mapping behind.
struct BadFile {
  const char* what;
  std::string header;  // the JSON text, or anything else
  std::string data;
  const char* says;  // a part of the message besides the path
};

TEST(Safetensors, DamagedFilesAreCleanErrorsNamingTheFile) {
  testing::ScratchDir dir("safetensors_bad");
  const std::string f32x2 = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::vector<BadFile> cases = {
      {"not JSON", "this is not json", "", "corrupt safetensors header"},
      {"JSON cut short", f32x2.substr(0, 20), std::string(8, 'x'), "corrupt safetensors header"},
      {"empty header", "", "", "corrupt safetensors header"},
      {"header not an object", "[1, 2]", "", "corrupt safetensors header"},
      {"entry not an object", R"({"t": 3})", "", "corrupt safetensors header"},
      {"dtype missing", R"({"t":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x'), "corrupt"},
      {"unknown dtype", R"({"t":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "xx", "dtype F8_E4M3"},
      {"negative dim", R"({"t":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", "xx", "non-negative"},
      {"fractional dim", R"({"t":{"dtype":"U8","shape":[1.5],"data_offsets":[0,2]}})", "xx", "non-negative"},
      {"too many dims", R"({"t":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})", "x", "at most"},
      {"one offset", R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", "xx", "[begin, end]"},
      {"negative offset", R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[-1,1]}})", "xx", "[begin, end]"},
      {"offsets reversed", R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[2,0]}})", "xx", "claims bytes [2, 0)"},
      {"end past the data", f32x2, std::string(7, 'x'), "claims bytes [0, 8) of a 7-byte data section"},
      {"offset near 2^64", R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[18446744073709551615,1]}})", "x",
       "truncated or corrupt"},
      {"shape larger than extent", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(12, 'x'),
       "claims bytes [0, 8)"},
      {"shape smaller than extent", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", std::string(8, 'x'),
       "claims bytes [0, 8)"},
      {"dims whose product overflows",
       R"({"t":{"dtype":"U8","shape":[1099511627776,1099511627776,0],)"
       R"("data_offsets":[0,0]}})",
       "", "claims bytes [0, 0)"},
      {"overlapping tensors",
       R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
       std::string(8, 'x'), "overlap"},
      {"metadata not strings", R"({"__metadata__":{"step":3}})", "", "corrupt safetensors header"},
      {"metadata not an object", R"({"__metadata__":"x"})", "", "corrupt safetensors header"},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.str("bad.safetensors");
    write_raw(path, c.header, c.data);
    NANODDP_EXPECT_ERROR(SafetensorsFile f(path), path, c.says);
    EXPECT_FALSE(is_mapped(path));
  }
}

// Damage to the length prefix itself: fewer than 8 bytes, or a header length the file cannot hold.
TEST(Safetensors, TruncatedFilesAreCleanErrorsNamingTheFile) {
  testing::ScratchDir dir("safetensors_truncated");
  const std::string path = dir.str("t.safetensors");
  std::ofstream(path, std::ios::binary).flush();
  NANODDP_EXPECT_ERROR(SafetensorsFile f(path), path, "not a safetensors file");
  std::ofstream(path, std::ios::binary) << "abc";
  NANODDP_EXPECT_ERROR(SafetensorsFile f(path), path, "not a safetensors file");
  // A good file cut anywhere inside its header or data: the header length or an extent no longer fits.
  SafetensorsWriter w;
  w.add("t", patterned({16}, DType::F32, 1));
  w.write(path);
  const std::string whole = testing::read_file(path);
  for (size_t keep : {size_t{8}, size_t{20}, whole.size() - 64, whole.size() - 1}) {
    SCOPED_TRACE(keep);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << whole.substr(0, keep);
    NANODDP_EXPECT_ERROR(SafetensorsFile f(path), path, "truncated");
    EXPECT_FALSE(is_mapped(path));
  }
  // The length field alone claims more than the file holds (up to 2^64 - 1).
  for (uint64_t n : {uint64_t{1000}, ~uint64_t{0}, ~uint64_t{0} - 7}) {
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &n, 8);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes << "{}";
    NANODDP_EXPECT_ERROR(SafetensorsFile f(path), path, "truncated");
  }
  NANODDP_EXPECT_ERROR(SafetensorsFile f(dir.str("missing.safetensors")), "cannot open",
                       dir.str("missing.safetensors"));
  NANODDP_EXPECT_ERROR(SafetensorsFile f(dir.str()), dir.str(), "is a directory");
}

// Tensors that share no bytes are fine in any order, and zero-byte tensors may sit anywhere: only
// a byte claimed twice is an overlap.
TEST(Safetensors, AdjacentOutOfOrderAndEmptyExtentsAreAccepted) {
  testing::ScratchDir dir("safetensors_order");
  const std::string path = dir.str("o.safetensors");
  write_raw(path,
            R"({"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
            R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
            R"("e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}})",
            "abcdefgh");
  SafetensorsFile f(path);
  Tensor a = f.read("a"), b = f.read("b");
  EXPECT_EQ(std::string(static_cast<const char*>(a.raw()), 4), "abcd");
  EXPECT_EQ(std::string(static_cast<const char*>(b.raw()), 4), "efgh");
  EXPECT_EQ(f.read("e").numel(), 0);
}

}  // namespace
}  // namespace nanoddp
